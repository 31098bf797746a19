"""The MAPPO example runs end to end on a tiny budget and writes its files."""

import csv
import importlib
import json
import os
import sys
import warnings
from pathlib import Path

import pytest
from envs import Drift, PredatorPreyCount

import marl_envs
from marl_envs import registry

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import mappo  # noqa: E402

TINY = ["--num-envs", "6", "--frames", "240", "--epochs", "1", "--minibatch", "20", "--hidden", "16", "--quiet"]


@pytest.fixture(autouse=True)
def test_envs(monkeypatch):
    monkeypatch.setattr(registry, "_USER_ENVS", {})
    marl_envs.register("test/drift", Drift)
    marl_envs.register("test/predator_prey", PredatorPreyCount)


def _check_outputs(out: Path, env: str, groups: list[str] | None = None) -> dict:
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env"] == env and summary["frames"] == 240
    for key in ("wall_s", "final_mean_episode_reward", "random_policy_reward"):
        assert isinstance(summary[key], float), key
    rows = list(csv.DictReader((out / "metrics.csv").read_text().splitlines()))
    assert [int(r["frames"]) for r in rows] == [60 * (i + 1) for i in range(len(rows))]
    for group in groups or []:
        assert f"reward_{group}" in rows[0]
    assert (out / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    return summary


@pytest.mark.parametrize("extra", [[], ["--ippo"]], ids=["mappo", "ippo"])
def test_continuous_multi_agent(tmp_path, extra):
    summary = _check_outputs(_run(tmp_path, "test/drift", ["--env-kwargs", "max_steps=10", *extra]), "test/drift")
    assert summary["algorithm"] == ("IPPO" if extra else "MAPPO")


def _run(out, env, extra) -> Path:
    mappo.main(["--env", env, "--out", str(out), "--steps-per-batch", "10", *TINY, *extra])
    return out


def test_two_groups_discrete_with_mask_and_state(tmp_path):
    _check_outputs(_run(tmp_path, "test/predator_prey", ["--env-kwargs", "max_steps=10"]), "test/predator_prey", ["predator", "prey"])


def test_single_agent_root_keys(tmp_path):
    _check_outputs(_run(tmp_path, "test/drift", ["--env-kwargs", "single_agent=True", "max_steps=10"]), "test/drift")


@pytest.mark.skipif(not marl_envs.backend_installed("vmas"), reason="needs the vmas extra")
def test_vmas_navigation_writes_gif(tmp_path):
    mappo.main(["--env", "vmas/navigation", "--env-kwargs", "n_agents=2", "max_steps=10", "--out", str(tmp_path),
                "--steps-per-batch", "10", *TINY])
    _check_outputs(tmp_path, "vmas/navigation")
    assert (tmp_path / "policy.gif").read_bytes()[:3] == b"GIF"


# ----------------------------------------------------------------------------------------------------
# examples/mappo_torchrl.py (TorchRL's components only); runs in .venv-torchrl
# ----------------------------------------------------------------------------------------------------
@pytest.fixture
def mappo_torchrl():
    if os.environ.get("MARL_ENVS_REQUIRE_TORCHRL") != "1":
        pytest.importorskip("torchrl", reason="the TorchRL example is tested in .venv-torchrl (make test)")
    with warnings.catch_warnings():
        # torchrl 0.14.1 deprecates its own weight-updater classes while importing torchrl.collectors
        warnings.filterwarnings("ignore", message=".*inherits from WeightUpdaterBase is deprecated",
                                category=DeprecationWarning)
        return importlib.import_module("mappo_torchrl")


@pytest.mark.parametrize("env, extra, groups", [
    ("test/drift", ["--env-kwargs", "max_steps=10"], None),
    ("test/drift", ["--env-kwargs", "single_agent=True", "max_steps=10", "--ippo"], None),
    ("test/predator_prey", ["--env-kwargs", "max_steps=10"], ["predator", "prey"]),
], ids=["continuous", "single_agent", "two_groups_masked_discrete"])
def test_mappo_torchrl_runs_tiny(mappo_torchrl, tmp_path, env, extra, groups):
    mappo_torchrl.main(["--env", env, "--out", str(tmp_path), "--steps-per-batch", "10", *TINY, *extra])
    summary = _check_outputs(tmp_path, env, groups)
    assert summary["algorithm"] == ("IPPO" if "--ippo" in extra else "MAPPO")
    assert not any(value != value for value in (summary["final_mean_episode_reward"], summary["random_policy_reward"]))
