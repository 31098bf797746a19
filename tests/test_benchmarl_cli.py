"""BenchMARL's own command line (``python -m benchmarl.run``) with our tasks: ``task=marl_envs/<name>``.

Each run is BenchMARL's entry point in a fresh interpreter, as a user starts it; Hydra finds our plugin
(``hydra_plugins.marl_envs_benchmarl``) by itself. These run in .venv-benchmarl (``make test`` sets
MARL_ENVS_REQUIRE_BENCHMARL=1); elsewhere they skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import marl_envs

if os.environ.get("MARL_ENVS_REQUIRE_BENCHMARL") != "1":
    pytest.importorskip("benchmarl", reason="the BenchMARL tasks are tested in .venv-benchmarl (make test)")

HAS = {backend: marl_envs.backend_installed(backend) for backend in marl_envs.available_backends()}
#: BenchMARL's experiment made small: 2 iterations of 200 frames over 4 envs, then 2 evaluation episodes.
SMALL = [f"experiment.{key}={value}" for key, value in {
    "sampling_device": "cpu", "train_device": "cpu", "buffer_device": "cpu", "max_n_frames": 400,
    "on_policy_collected_frames_per_batch": 200, "on_policy_n_envs_per_worker": 4,
    "on_policy_n_minibatch_iters": 1, "on_policy_minibatch_size": 100,
    "off_policy_collected_frames_per_batch": 200, "off_policy_n_envs_per_worker": 4,
    "off_policy_n_optimizer_steps": 2, "off_policy_train_batch_size": 64,
    "evaluation_interval": 200, "evaluation_episodes": 2, "render": "false", "loggers": "[csv]",
    "create_json": "false"}.items()]


def _needs(*backends: str):
    missing = [backend for backend in backends if not HAS[backend]]
    return pytest.mark.skipif(bool(missing), reason=f"not installed: {missing}")


def benchmarl_run(tmp_path, *arguments: str) -> subprocess.CompletedProcess:
    """``python -m benchmarl.run ARGUMENTS`` in a new interpreter, its outputs under ``tmp_path``."""
    return subprocess.run([sys.executable, "-m", "benchmarl.run", *arguments, *SMALL, f"hydra.run.dir={tmp_path}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)


def _finished(run: subprocess.CompletedProcess, tmp_path) -> None:
    assert run.returncode == 0, run.stderr[-3000:]
    assert "2/2" in run.stderr  # BenchMARL's progress bar reached its second iteration
    assert list(tmp_path.rglob("*.csv")), "no BenchMARL csv log written"


#: The command lines of docs/benchmarl.md (its ```bash block under "BenchMARL's own command line").
DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarl.md"
COMMANDS = [line.split()[3:] for line in DOC.read_text().splitlines() if line.startswith("python -m benchmarl.run ")]


def _backends(arguments: list[str]) -> list[str]:
    task = next(a for a in arguments if a.startswith("task=marl_envs/")).removeprefix("task=marl_envs/")
    return [backend for backend in HAS if task.startswith(f"{backend}_")]


def test_the_page_shows_the_commands():
    assert len(COMMANDS) == 6 and all(len(_backends(arguments)) == 1 for arguments in COMMANDS)
    assert {a for arguments in COMMANDS for a in arguments if a.startswith("algorithm=")} == {
        "algorithm=mappo", "algorithm=iql", "algorithm=qmix"}


@pytest.mark.parametrize("arguments", [pytest.param(a, marks=_needs(*_backends(a)), id=" ".join(a[:2]) + (
    f" {a[2]}" if len(a) > 2 else "")) for a in COMMANDS])
def test_each_command_of_the_page_runs(arguments, tmp_path):
    run = benchmarl_run(tmp_path, *arguments)
    _finished(run, tmp_path)
    task = next(a for a in arguments if a.startswith("task="))
    assert f"Task: {task.removeprefix('task=')}" in run.stdout


@_needs("vmas")
def test_benchmarls_own_task_configuration_is_the_default(tmp_path):
    run = benchmarl_run(tmp_path, "algorithm=mappo", "task=marl_envs/vmas_balance")
    _finished(run, tmp_path)
    assert "n_agents: 4" in run.stdout and "max_steps: 100" in run.stdout  # BenchMARL's own balance.yaml


@_needs("pettingzoo")
def test_grid_observations_name_the_cnn_before_training(tmp_path):
    run = benchmarl_run(tmp_path, "algorithm=mappo", "task=marl_envs/pettingzoo_classic_tictactoe_v3")
    assert run.returncode != 0
    assert ("ValueError: task=marl_envs/pettingzoo_classic_tictactoe_v3 observes agents/observation as a grid of "
            "shape (3, 3, 2) per agent, and model=layers/mlp and model@critic_model=layers/mlp (BenchMARL's MLP) "
            "take flat vectors: pick BenchMARL's CNN, model=layers/cnn model@critic_model=layers/cnn (its 3x3 "
            "kernels without padding need at least 7x7: add model.cnn_paddings=1 critic_model.cnn_paddings=1), or "
            "flatten the grids for the MLP with task.flatten_observations=true") in run.stderr
    assert "mean return" not in run.stderr  # refused before the first iteration


@_needs("vmas")
def test_missing_max_steps_names_the_command_line_fix(tmp_path):
    run = benchmarl_run(tmp_path, "algorithm=mappo", "task=marl_envs/vmas_waterfall")
    assert run.returncode != 0
    assert ("'vmas/waterfall' has no time limit of its own and BenchMARL's evaluation rolls episodes out for "
            "max_steps steps: pass it, task.max_steps=N") in run.stderr


def test_every_env_has_one_command_line_name():
    with warnings.catch_warnings():  # TorchRL deprecates its own weight updaters while BenchMARL imports them
        warnings.simplefilter("ignore", DeprecationWarning)
        from marl_envs.benchmarl import command_line_name

    names = marl_envs.available_envs()
    flat = {command_line_name(name) for name in names}
    assert len(flat) == len(names)
    assert all("/" not in name for name in flat)  # BenchMARL splits task=marl_envs/<name> on one "/"
