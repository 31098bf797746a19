"""The benchmark harness: one interleaving scheme for every backend, through the References protocol."""

import importlib
import json
import sys
from pathlib import Path

import pytest
from envs import Drift

import marl_envs
from marl_envs import bench, registry

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def script(name, folder: Path = BENCHMARKS):
    """A script of ``folder`` (benchmarks/, or the docs' extensions) as a module (the folder is no package)."""
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return importlib.import_module(name)


class _Recorder:
    def __init__(self, label, calls):
        self.label, self.calls = label, calls

    def __call__(self, steps):
        self.calls.append((self.label, steps.start, steps.stop))

    def sync(self):
        pass


def test_loops_take_turns_in_rotating_order_after_a_warm_up(monkeypatch):
    calls = []
    refs = bench.References(
        default_num_envs=3,
        loops=lambda env, plan, chunks: ({"a": _Recorder("a", calls), "b": _Recorder("b", calls)}, {"compile": 1.5}),
        timings=lambda env: {"ours: build": 0.5},
    )
    monkeypatch.setattr(bench, "references", lambda backend: refs)
    monkeypatch.setattr(registry, "_USER_ENVS", {"test/drift": lambda num_envs, device, seed: Drift(num_envs=num_envs)})
    rows = bench.run("test/drift", steps=6, rounds=3)
    assert calls[:2] == [("a", 0, 3), ("b", 0, 3)]  # warm-up: the first WARMUP steps
    timed = calls[2:]
    # rounds of (ours, a, b) rotating: ours a b | a b ours | b ours a (ours is not recorded here)
    assert [label for label, *_ in timed] == ["a", "b", "a", "b", "b", "a"]
    assert [(start, stop) for _, start, stop in timed] == [(3, 5), (3, 5), (5, 7), (5, 7), (7, 9), (7, 9)]
    assert [label for label, _, _ in rows] == ["marl_envs Drift, auto-reset", "a", "b", "  build Drift",
                                               "  ours: build", "  compile"]
    assert [steps for *_, steps in rows] == [18, 18, 18, 0, 0, 0]  # 3 envs x 6 steps
    assert rows[-1][1] == 1.5


def test_rounds_that_do_not_divide_the_steps_make_one_round(monkeypatch):
    calls = []
    refs = bench.References(default_num_envs=2, loops=lambda env, plan, chunks: ({"a": _Recorder("a", calls)}, {}))
    monkeypatch.setattr(bench, "references", lambda backend: refs)
    monkeypatch.setattr(registry, "_USER_ENVS", {"test/drift": lambda num_envs, device, seed: Drift(num_envs=num_envs)})
    bench.run("test/drift", steps=7, rounds=3)
    assert calls == [("a", 0, 3), ("a", 3, 10)]


def test_format_bench_ratios():
    text = bench.format_bench("vmas/x", 8, 10, [("ours", 2.0, 80), ("raw", 1.0, 80), ("compile", 3.0, 0)])
    lines = text.splitlines()
    assert lines[0] == "vmas/x: 8 envs x 10 steps"
    assert lines[3].split() == ["ours", "2.000", "40", "1.00", "1.00"]
    assert lines[4].split() == ["raw", "1.000", "80", "2.00", "0.50"]
    assert lines[5].split() == ["compile", "3.000", "-", "-", "-"]


def test_every_backend_declares_its_references():
    for backend in marl_envs.available_backends():
        if marl_envs.backend_installed(backend):
            refs = bench.references(backend)
            assert isinstance(refs, bench.References) and refs.default_num_envs >= 1


def test_rollout_benchmark_prints_its_table(capsys):
    """benchmarks/rollout.py: each loop runs the steps asked, ratios against the step loop."""
    rollout = script("rollout")

    rollout.main(["vmas/balance", "--num-envs", "2", "--steps", "3", "--rounds", "1"])
    out = capsys.readouterr().out
    assert "vmas/balance: 2 envs, up to 3 steps, median of 1 rounds" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(("step_and", "rollout"))]
    assert len(rows) == 3 and rows[0][-1] == "1.00" and rows[1][-3] == "3"


def test_step_floor_benchmark_prints_its_table(capsys):
    """benchmarks/step_floor.py: the raw loops, the floor and ours take turns; ratios against the raw loop and the
    floor."""
    pytest.importorskip("gymnax")
    floor = script("step_floor")

    floor.main(["gymnax/CartPole-v1", "--steps", "5", "--rounds", "2"])
    out = capsys.readouterr().out
    assert "gymnax/CartPole-v1: 1 envs, 5 steps a turn, median of 2 turns" in out
    lines = [line for line in out.splitlines() if line.startswith(("pure JAX", "the ", "ours"))]
    rows = {line.split(":")[0]: line.split() for line in lines}
    assert list(rows) == ["pure JAX", "pure JAX, the same step from torch", "the floor", "ours"]
    assert rows["pure JAX"][-2] == "1.00" and rows["the floor"][-1] == "1.00"


def test_step_floor_refuses_an_env_it_does_not_model():
    pytest.importorskip("brax")
    floor = script("step_floor")
    env = marl_envs.make("brax/fast", num_envs=2, seed=0)  # Brax restarts ended envs on the host
    with pytest.raises(SystemExit, match="the floor takes an env on the CPU path"):
        floor.floor_loop(env, [])
    env.close()


def test_raw_pettingzoo_loop_steps_continuous_actions_as_arrays():
    """The raw reference loop holds continuous actions as float32 arrays, as a user's loop would: a list would
    make gymnasium cast (and warn) on every agent step, slowing the reference."""
    import warnings

    import numpy as np

    pytest.importorskip("pettingzoo")
    env = marl_envs.make("pettingzoo/mpe/simple_spread_v3", num_envs=2, N=2, continuous_actions=True, seed=0)
    plan = [env.rand_action(env.reset()) for _ in range(3)]
    loops, _ = bench.references("pettingzoo").loops(env, plan, [range(0, 3)])
    raw = loops["raw PettingZoo loop"]
    action = raw.drawn[0][0][1][0]  # step 0, group 0, env 1, agent 0
    assert isinstance(action, np.ndarray) and action.dtype == np.float32
    assert np.array_equal(action, plan[0]["agents", "action"][1, 0].numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        raw(range(0, 3))
    for loop in loops.values():
        getattr(getattr(loop, "env", None), "close", lambda: None)()
    env.close()


def test_brax_bench_prints_only_its_table():
    """``marl-envs bench`` on a Brax env loaded from its export imports Brax for the reference loops quietly."""
    import subprocess

    pytest.importorskip("brax")
    code = ("from marl_envs import cli\n"
            "cli.main(['bench', 'brax/fast', '--num-envs', '2', '--steps', '2', '--rounds', '1'])\n")
    for _ in range(2):  # the second run loads the env from the export the first one saved
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        assert done.stderr == "" and done.stdout.startswith("brax/fast: 2 envs x 2 steps\n"), done


def test_a_recorded_run_renders_in_the_results_table(tmp_path, capsys):
    """``marl-envs bench NAME --record FILE`` appends one record a run; the docs' renderer makes one row of each
    env, size, hardware and raw loop from the latest day's runs (median ratio, range)."""
    from marl_envs import cli

    records = tmp_path / "results.jsonl"
    for _ in range(2):
        assert cli.main(["bench", "vmas/balance", "n_agents=2", "--num-envs", "4", "--steps", "6", "--rounds", "2",
                         "--record", str(records)]) == 0
    assert f"recorded in {records}" in capsys.readouterr().out
    runs = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(runs) == 2
    run = runs[0]
    assert (run["env"], run["env_kwargs"], run["num_envs"], run["device"]) == ("vmas/balance", {"n_agents": 2}, 4,
                                                                              "cpu")
    assert run["command"] == "marl-envs bench vmas/balance n_agents=2 --num-envs 4 --steps 6 --rounds 2"
    assert {"marl-envs", "torch", "vmas"} <= run["versions"].keys() and run["hardware"].endswith(" cores")
    reference = run["references"][0]
    assert reference["ratio"] == pytest.approx(run["ours"]["us_per_step"] / reference["us_per_step"])
    results = script("results_table", BENCHMARKS.parent / "docs" / "_ext")
    rows = results.rows(runs)
    assert len(rows) == len(run["references"])  # one row a raw loop; the two runs in it
    assert rows[0][0] == "`vmas/balance` `n_agents=2`" and rows[0][3] == run["date"] and "2 runs" in rows[0][-1]


@pytest.mark.parametrize("name", ["gymnax/CartPole-v1", "brax/fast"])
def test_bridge_loop_steps_the_raw_step_from_torch_and_hands_its_outputs_to_torch(name):
    """The loop of a torch learner's own bridge to the raw library steps the raw loop's compiled step with the same
    actions, taken from torch tensors, and its last tensors are that step's observation, reward and done."""
    import numpy as np
    import torch

    backend = name.partition("/")[0]
    pytest.importorskip(backend)
    env = marl_envs.make(name, num_envs=2, seed=0)
    generator = torch.Generator().manual_seed(0)
    plan = [env.full_action_spec.rand(generator=generator) for _ in range(6)]
    loops, _ = bench.references(backend).loops(env, plan, [range(0, 6)])
    raw = next(loop for label, loop in loops.items() if label.endswith("auto-reset"))
    bridge = loops["pure JAX, the same step from torch: actions in, observation, reward, done out"]
    outputs = (lambda c: (c[0], c[2], c[3])) if backend == "gymnax" else (lambda s: (s.obs, s.reward, s.done))
    start = np.array(outputs(bridge.state)[0])
    raw(range(0, 6))
    bridge(range(0, 6))
    assert len(bridge.read) == 3 and all(isinstance(tensor, torch.Tensor) for tensor in bridge.read)
    for tensor, array in zip(bridge.read, outputs(raw.state), strict=True):
        np.testing.assert_array_equal(tensor.numpy(), np.asarray(array))
    assert not np.array_equal(bridge.read[0].numpy(), start)  # the steps moved the envs
    env.close()
