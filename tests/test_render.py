"""Rendering is what ``env.renders`` says, in a fresh interpreter per backend: no import order (pytest's, another
test's) makes a renderer work or fail. An env that renders gives an RGB frame; one that does not says why."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import marl_envs
from marl_envs import registry

#: backend -> (env, keywords): one env per backend, built to draw where its family can (its record's ``example``)
ONE_PER_BACKEND = {backend: registry.backend_record(backend).example for backend in marl_envs.available_backends()}

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


def test_every_backend_declares_an_env_of_its_own_family():
    for backend, example in ONE_PER_BACKEND.items():
        assert example is not None, f"the {backend} record declares neither check_env nor example"
        name, kwargs = example
        assert name.startswith(f"{backend}/") and json.loads(json.dumps(kwargs)) == kwargs, (backend, example)


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
