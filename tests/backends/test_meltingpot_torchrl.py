"""Melting Pot through TorchRL's class names (``marl_envs.torchrl.MeltingpotEnv``) and BenchMARL's tasks, beside
TorchRL's own ``MeltingpotEnv``. These run in the TorchRL virtualenvs (``make test``); elsewhere they skip."""

from __future__ import annotations

import os
import sys
import warnings

import pytest
import torch

import marl_envs

if os.environ.get("MARL_ENVS_REQUIRE_TORCHRL") != "1":
    pytest.importorskip("torchrl", reason="the TorchRL interop is tested in .venv-torchrl (make test)")
if not marl_envs.backend_installed("meltingpot"):
    pytest.skip("meltingpot is not installed", allow_module_level=True)

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=".*inherits from WeightUpdaterBase is deprecated",
                            category=DeprecationWarning)
    from torchrl.envs.utils import check_env_specs as torchrl_check_env_specs

import marl_envs.torchrl as ours  # noqa: E402

SUBSTRATE = "collaborative_cooking__asymmetric"


def _layout(env, steps: int = 3) -> dict:
    data = env.rollout(steps, break_when_any_done=False)
    return {key: (tuple(data.get(key).shape[env.batch_dims + 1:]), data.get(key).dtype)
            for key in data.keys(True, True)}


@pytest.fixture(scope="module")
def theirs_and_ours():
    from torchrl.envs.libs.meltingpot import MeltingpotEnv

    # ours first: it imports Melting Pot without TensorFlow, and TorchRL's then finds it imported (TensorFlow,
    # imported beside JAX and torch, can crash the process: seen under pytest-xdist on a 2-core machine)
    mine = ours.MeltingpotEnv(SUBSTRATE, batch_size=(2,), seed=0)
    theirs = MeltingpotEnv(SUBSTRATE)
    assert "tensorflow" not in sys.modules
    yield theirs, mine
    theirs.close()
    mine.close()


def test_torchrls_keywords_and_keys(theirs_and_ours):
    theirs, mine = theirs_and_ours
    torchrl_check_env_specs(mine)
    assert mine.batch_size == (2,) and mine.group_map == theirs.group_map
    expected, got = _layout(theirs), _layout(mine)
    # ours: rewards in float32 (the library's contract) and a "truncated" flag beside "done" and "terminated"
    different = {("next", "agents", "reward"), ("next", "truncated"), "truncated"}
    for key, (shape, dtype) in expected.items():
        if key in different:
            continue
        assert got[key] == (shape, dtype), key
    assert got[("next", "agents", "reward")] == ((2, 1), torch.float32)
    assert mine.get_rgb_image().shape == (40, 72, 3)


def test_the_wrapper_takes_a_name_and_refuses_a_built_substrate():
    env = ours.MeltingpotWrapper(env=SUBSTRATE, categorical_actions=False, max_steps=5)
    try:
        assert env.batch_size == () and env.full_action_spec["agents", "action"].shape == (2, 8)  # TorchRL's
        assert env.rollout(10, break_when_any_done=False)["next", "done"].reshape(-1).tolist() == [False] * 4 + [True] \
            + [False] * 4 + [True]
    finally:
        env.close()
    with pytest.raises(TypeError, match=r"MeltingpotWrapper takes the substrate's name here \(env='clean_up'\), got "
                                        r"object: a built substrate cannot be pickled"):
        ours.MeltingpotWrapper(env=object())


def test_benchmarl_trains_its_cnn_on_the_images(tmp_path):
    pytest.importorskip("benchmarl", reason="the BenchMARL tasks are tested in .venv-benchmarl (make test)")
    from benchmarl.algorithms import MappoConfig
    from benchmarl.experiment import Experiment, ExperimentConfig
    from benchmarl.models import CnnConfig

    from marl_envs.benchmarl import task

    cfg = ExperimentConfig.get_from_yaml()
    cfg.sampling_device = cfg.train_device = cfg.buffer_device = "cpu"
    cfg.max_n_iters = 1
    cfg.on_policy_collected_frames_per_batch = 40
    cfg.on_policy_n_envs_per_worker = 2
    cfg.on_policy_n_minibatch_iters, cfg.on_policy_minibatch_size = 1, 20
    cfg.evaluation, cfg.render, cfg.loggers, cfg.create_json, cfg.checkpoint_interval = False, False, [], False, 0
    cfg.save_folder = str(tmp_path)
    cnn = CnnConfig.get_from_yaml()
    chosen = task(f"meltingpot/{SUBSTRATE}", max_steps=20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        experiment = Experiment(task=chosen, algorithm_config=MappoConfig.get_from_yaml(), model_config=cnn,
                                critic_model_config=cnn, seed=0, config=cfg)
        experiment.run()
    assert experiment.n_iters_performed == 1 and experiment.total_frames == 40
    assert experiment.observation_spec["agents", "observation", "RGB"].dtype == torch.float32


def test_benchmarls_command_line_names_every_substrate():
    pytest.importorskip("benchmarl", reason="the BenchMARL tasks are tested in .venv-benchmarl (make test)")
    from benchmarl.environments import task_config_registry

    from marl_envs.benchmarl import add_command_line_tasks

    add_command_line_tasks()
    for name in marl_envs.available_envs("meltingpot"):
        assert f"marl_envs/{name.replace('/', '_')}" in task_config_registry


@pytest.mark.slow
def test_benchmarls_command_line_trains_the_cnn(tmp_path):
    pytest.importorskip("benchmarl", reason="the BenchMARL tasks are tested in .venv-benchmarl (make test)")
    import subprocess
    import sys

    small = {"sampling_device": "cpu", "train_device": "cpu", "buffer_device": "cpu", "max_n_frames": 40,
             "on_policy_collected_frames_per_batch": 40, "on_policy_n_envs_per_worker": 2,
             "on_policy_n_minibatch_iters": 1, "on_policy_minibatch_size": 20, "evaluation": "false",
             "render": "false", "loggers": "[csv]", "create_json": "false"}
    run = subprocess.run([sys.executable, "-m", "benchmarl.run", "algorithm=mappo",
                          f"task=marl_envs/meltingpot_{SUBSTRATE}", "task.max_steps=20", "model=layers/cnn",
                          "model@critic_model=layers/cnn", *(f"experiment.{k}={v}" for k, v in small.items()),
                          f"hydra.run.dir={tmp_path}"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
