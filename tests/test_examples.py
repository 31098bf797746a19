"""The MAPPO example runs end to end on a tiny budget and writes its files."""

import csv
import json
import sys
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
