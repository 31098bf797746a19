"""marl_envs.distributed, and examples/mappo.py run by torchrun on 2 CPU processes (gloo)."""

import csv
import importlib
import importlib.util
import json
import re
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from envs import Drift

import marl_envs
from marl_envs import distributed, registry
from marl_envs.distributed import RankInfo, rank_info, rank_seed

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "examples"), str(ROOT / "benchmarks")]
import mappo  # noqa: E402
import scaling  # noqa: E402

TORCHRUN = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}


# ---------------------------------------------------------------------------------------------------
# Rank info, seeds, devices
# ---------------------------------------------------------------------------------------------------
def test_rank_info_from_torchrun_variables():
    assert rank_info({}) == RankInfo(0, 1, 0, 1, launched=False)
    info = rank_info(TORCHRUN)
    assert info == RankInfo(3, 4, 1, 2, launched=True) and not info.is_main
    assert rank_info({**TORCHRUN, "RANK": "0"}).is_main


@pytest.mark.parametrize(("environ", "match"), [
    ({"RANK": "0", "WORLD_SIZE": "2"},
     "RANK, WORLD_SIZE set but not LOCAL_RANK, LOCAL_WORLD_SIZE; launch with torchrun"),
    ({**TORCHRUN, "WORLD_SIZE": "four"}, "WORLD_SIZE='four' is not an integer"),
    ({**TORCHRUN, "RANK": "4"},
     r"inconsistent torchrun variables RANK=4, WORLD_SIZE=4, .*expected 0 <= RANK < WORLD_SIZE"),
    ({**TORCHRUN, "LOCAL_WORLD_SIZE": "8"}, "LOCAL_WORLD_SIZE=8; expected"),
])
def test_rank_info_rejects_partial_or_inconsistent_variables(environ, match):
    with pytest.raises(ValueError, match=match):
        rank_info(environ)


def test_rank_seed_keeps_one_process_seed_and_spreads_ranks():
    assert [rank_seed(s, 0, 1) for s in (0, 5, 2**31 - 1)] == [0, 5, 2**31 - 1]
    for world in (2, 3, 8, 1024):
        seeds = [rank_seed(11, r, world) for r in range(world)]
        assert seeds[0] == 11 and seeds == sorted(set(seeds))
        # per-env seeds seed + i (PettingZoo) of different ranks never meet for num_envs up to the spacing
        spacing = min(b - a for a, b in zip(seeds, seeds[1:]))
        assert spacing == 2**31 // world and max(seeds) < 2**32
    assert rank_seed(11, 1, 2) == rank_seed(11, 1, 2) != rank_seed(12, 1, 2)  # reproducible, seed-dependent


def test_rank_seed_bad_arguments():
    with pytest.raises(TypeError, match="seed must be an int, got 1.5"):
        rank_seed(1.5, 0, 1)
    with pytest.raises(ValueError, match="seed must be >= 0, got -1"):
        rank_seed(-1, 0, 1)
    with pytest.raises(ValueError, match="rank=2, world_size=2; expected world_size >= 1 and 0 <= rank < world_size"):
        rank_seed(0, 2, 2)


def test_per_rank_env_streams_differ_and_repeat():
    def first_obs(rank):
        env = Drift(num_envs=4)
        env.set_seed(rank_seed(0, rank, 2))
        return env.reset()["agents", "observation"]

    assert not torch.equal(first_obs(0), first_obs(1))
    assert torch.equal(first_obs(1), first_obs(1))


def test_rank_device_maps_local_rank_to_a_gpu(monkeypatch):
    info = rank_info(TORCHRUN)
    assert distributed.rank_device(info, cuda=False) == torch.device("cpu")
    assert distributed.process_group_backend("cpu", info) == "gloo"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert distributed.rank_device(info) == torch.device("cuda", 1)
    assert distributed.rank_device(rank_info({**TORCHRUN, "LOCAL_RANK": "0"})) == torch.device("cuda", 0)
    assert distributed.process_group_backend("cuda:1", info) == "nccl"  # 2 ranks on 2 GPUs
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert distributed.rank_device(info) == torch.device("cuda", 0)  # 2 ranks share one GPU ...
    assert distributed.process_group_backend("cuda:0", info) == "gloo"  # ... which NCCL does not allow


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without CUDA")
def test_rank_device_without_cuda():
    assert distributed.rank_device(RankInfo()) == torch.device("cpu")
    with pytest.raises(RuntimeError, match="cuda=True but torch sees no CUDA device"):
        distributed.rank_device(RankInfo(), cuda=True)


def test_init_process_group_outside_torchrun_does_nothing():
    assert distributed.init_process_group("cpu", RankInfo()) is None
    assert not torch.distributed.is_initialized()


@pytest.mark.skipif(not marl_envs.backend_installed("brax"), reason="needs JAX (the brax extra)")
def test_jax_device():
    import jax

    assert distributed.jax_device("cpu") == jax.local_devices(backend="cpu")[0]
    with pytest.raises(ValueError, match="device='mps' is not supported by the JAX backends"):
        distributed.jax_device("mps")
    gpus = [d.local_hardware_id for d in jax.local_devices()] if jax.default_backend() == "gpu" else []
    missing = max(gpus, default=-1) + 1
    with pytest.raises(ValueError, match=rf"device='cuda:{missing}' but JAX sees {len(gpus)} CUDA device\(s\)"):
        distributed.jax_device(f"cuda:{missing}")


# ---------------------------------------------------------------------------------------------------
# examples/mappo.py: 2 ranks of B envs against 1 process of 2B envs
# ---------------------------------------------------------------------------------------------------
B = 6
TINY = ["--env", "test/drift", "--env-kwargs", "max_steps=10", "--steps-per-batch", "10", "--frames", "480",
        "--epochs", "2", "--minibatch", "20", "--hidden", "16", "--quiet"]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> Path:
    """A 2-rank torchrun of mappo.py (B envs per rank); returns its folder (records and outputs)."""
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available")
    path = tmp_path_factory.mktemp("two_ranks")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(ROOT / "tests" / "mappo_rank.py"), str(path / "record"), *TINY, "--num-envs", str(B),
           "--out", str(path / "out")]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={"OMP_NUM_THREADS": "1", **_env()})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return path


def _env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k not in distributed.TORCHRUN_VARS}


def _records(path: Path) -> list[dict]:
    return [json.loads((path / "record" / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_parameters_identical_on_every_rank_after_each_update(two_ranks):
    ranks = _records(two_ranks)
    params = [[u["params"] for u in rank["updates"]] for rank in ranks]
    assert len(params[0]) == 480 // (2 * B * 10) == 4
    assert params[0] == params[1]
    assert len(set(params[0])) == len(params[0])  # and they did change at every update


def test_ranks_collect_from_different_env_streams(two_ranks):
    r0, r1 = ([u["observations"] for u in rank["updates"]] for rank in _records(two_ranks))
    assert all(a != b for a, b in zip(r0, r1))


def test_episode_statistics_are_the_same_on_every_rank(two_ranks):
    r0, r1 = (rank["summary"] for rank in _records(two_ranks))
    assert r0["world_size"] == r1["world_size"] == 2
    for key in ("frames", "final_mean_episode_reward", "random_policy_reward", "random_policy_frames"):
        assert r0[key] == r1[key], key


@pytest.fixture
def test_envs(monkeypatch):
    monkeypatch.setattr(registry, "_USER_ENVS", {})
    marl_envs.register("test/drift", Drift)


def test_two_ranks_of_b_envs_match_one_process_of_2b(two_ranks, tmp_path, test_envs):
    one = mappo.main([*TINY, "--num-envs", str(2 * B), "--out", str(tmp_path)])
    two = json.loads((two_ranks / "out" / "summary.json").read_text())
    assert one["world_size"] == 1 and two["world_size"] == 2
    assert one.keys() == two.keys() and one["frames"] == two["frames"] == 480
    assert one["random_policy_frames"] == two["random_policy_frames"] == 480
    rows = [list(csv.DictReader((out / "metrics.csv").read_text().splitlines()))
            for out in (tmp_path, two_ranks / "out")]
    assert rows[0][0].keys() == rows[1][0].keys()
    assert [r["frames"] for r in rows[0]] == [r["frames"] for r in rows[1]] == ["120", "240", "360", "480"]
    frames = [u["frames"] for rank in _records(two_ranks) for u in rank["updates"]]
    assert set(frames) == {B * 10}  # each rank collected half of every update's frames
    assert (two_ranks / "out" / "learning_curve.png").exists()


def test_minibatch_must_split_over_ranks(monkeypatch, tmp_path, test_envs):
    for name, value in {**TORCHRUN, "RANK": "0", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match="--minibatch 21 counts samples over all 4 ranks; pass a multiple of 4"):
        mappo.main([*TINY, "--num-envs", "2", "--minibatch", "21", "--out", str(tmp_path)])


def test_scaling_doc_commands_parse():
    """The bash blocks of docs/scaling.md (not executed: they train for minutes) name real scripts and options."""
    from torch.distributed.run import parse_args as torchrun_args

    text = (ROOT / "docs" / "scaling.md").read_text()
    lines = [line for block in re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M) for line in block.splitlines()]
    commands = [shlex.split(line.split("  #")[0]) for line in lines if line.strip()]
    assert len(commands) >= 5
    scripts = {"mappo.py": mappo, "scaling.py": scaling}
    for words in commands:
        assert words[0] in ("python", "torchrun", "flock"), words
        if words[0] == "flock":
            words = words[2:]
        if words[0] == "torchrun":
            parsed = torchrun_args(words[1:])
            script, script_args = parsed.training_script, parsed.training_script_args
        else:
            script, script_args = words[1], words[2:]
        assert (ROOT / script).is_file(), script
        if Path(script).name == "mappo_torchrl.py":  # its arguments are read where TorchRL is installed
            if importlib.util.find_spec("torchrl") is None:
                continue
            with warnings.catch_warnings():  # torchrl 0.14.1 deprecates its own weight-updater classes on import
                warnings.filterwarnings("ignore", message=".*inherits from WeightUpdaterBase is deprecated",
                                        category=DeprecationWarning)
                scripts["mappo_torchrl.py"] = importlib.import_module("mappo_torchrl")
        scripts[Path(script).name].parse_args(script_args)
