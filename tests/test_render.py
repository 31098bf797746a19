"""Rendering is what ``env.renders`` says, in a fresh interpreter per backend: no import order (pytest's, another
test's) makes a renderer work or fail. An env that renders gives an RGB frame; one that does not says why."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import marl_envs

#: backend -> (env, keywords): one env per backend, built to draw where its family can
ONE_PER_BACKEND = {
    "vmas": ("vmas/balance", {"n_agents": 2}),
    "brax": ("brax/ant_4x2", {"backend": "spring"}),
    "playground": ("playground/CartpoleBalance", {}),
    "pettingzoo": ("pettingzoo/mpe/simple_spread_v3", {"N": 2, "render_mode": "rgb_array"}),
    "magent2": ("magent2/battle", {"map_size": 12, "render_mode": "rgb_array"}),
    "mamujoco": ("mamujoco/Hopper_3x1", {"render_mode": "rgb_array"}),
    "lbforaging": ("lbforaging/Foraging-5x5-2p-1f-v3", {"render_mode": "rgb_array"}),
    "rware": ("rware/rware-tiny-2ag-v2", {"render_mode": "rgb_array"}),
    "openspiel": ("openspiel/tic_tac_toe", {"render_mode": "rgb_array"}),
    "jaxmarl": ("jaxmarl/MPE_simple_spread_v3", {}),
    "gymnax": ("gymnax/CartPole-v1", {}),
    "jumanji": ("jumanji/Cleaner-v0", {}),
}

SCRIPT = """
import json, sys, warnings
warnings.simplefilter("ignore")
import marl_envs
name, kwargs = sys.argv[1], json.loads(sys.argv[2])
env = marl_envs.make(name, num_envs=2, seed=0, **kwargs)
env.reset()
try:
    frame = env.render(0)
    print(json.dumps({"renders": env.renders, "shape": list(frame.shape), "dtype": str(frame.dtype)}))
except Exception as error:
    print(json.dumps({"renders": env.renders, "error": type(error).__name__, "message": str(error)}))
"""


def test_every_backend_is_in_the_table():
    assert set(ONE_PER_BACKEND) == set(marl_envs.available_backends())


@pytest.mark.parametrize("backend", sorted(ONE_PER_BACKEND))
def test_render_is_what_renders_says_in_a_fresh_interpreter(backend):
    name, kwargs = ONE_PER_BACKEND[backend]
    done = subprocess.run([sys.executable, "-c", SCRIPT, name, json.dumps(kwargs)], capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).parent)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["renders"]:
        assert "error" not in result, f"{name} says it renders, then: {result}"
        height, width, channels = result["shape"]
        assert channels == 3 and height > 16 and width > 16 and result["dtype"] == "uint8", result
        assert height % 2 == 0 and width % 2 == 0, result  # an MP4 encoder's 4:2:0 needs even sides
    else:
        assert result.get("error") in ("NotImplementedError", "ValueError"), result
        assert "render" in result["message"] or "draw" in result["message"], result
