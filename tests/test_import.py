import subprocess
import sys

import pytest


def test_import_marl_envs_imports_no_backend():
    code = (
        "import sys, marl_envs, marl_envs.distributed\n"
        "heavy = {'jax', 'brax', 'vmas', 'pettingzoo', 'mpe2', 'torchrl'} & {m.split('.')[0] for m in sys.modules}\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_listing_names_imports_no_torch():
    """``marl-envs list``'s path: the package and the names, without torch or tensordict (seconds to import)."""
    code = (
        "import sys, marl_envs\n"
        "assert marl_envs.available_envs() and marl_envs.make and marl_envs.MarlGroupMapType\n"
        "heavy = {'torch', 'tensordict', 'numpy', 'jax'} & {m.split('.')[0] for m in sys.modules}\n"
        "assert not heavy, heavy\n"
        "from marl_envs import EnvBase, specs, check_env_specs\n"  # then loaded when asked for
        "assert 'torch' in sys.modules and EnvBase.__name__ == 'EnvBase'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_backend_classes_are_importable_from_the_top_level_lazily():
    code = (
        "import sys, marl_envs\n"
        "assert 'vmas' not in sys.modules\n"
        "from marl_envs import VmasEnv, VmasWrapper\n"
        "from marl_envs.backends import vmas\n"
        "assert VmasEnv is vmas.VmasEnv and VmasWrapper is vmas.VmasWrapper\n"
        "assert 'brax' not in sys.modules and 'pettingzoo' not in sys.modules\n"
        "assert {'BraxEnv', 'PettingZooWrapper'} <= set(dir(marl_envs))\n"
        "try:\n"
        "    marl_envs.VmasEnvv\n"
        "except AttributeError as err:\n"
        "    assert \"no attribute 'VmasEnvv'\" in str(err)\n"
        "else:\n"
        "    raise AssertionError('no AttributeError')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_importing_the_brax_backend_changes_nothing_outside():
    """No Brax import and no MUJOCO_GL until a Brax env is built (or Brax's names are listed)."""
    code = (
        "import os, sys\n"
        "os.environ.pop('MUJOCO_GL', None); os.environ.pop('DISPLAY', None)\n"
        "import marl_envs.backends.brax as backend\n"
        "assert 'brax' not in sys.modules and 'mujoco' not in sys.modules, 'imported Brax'\n"
        "assert 'MUJOCO_GL' not in os.environ\n"
        "backend.env_names()\n"
        "assert 'brax.envs' in sys.modules and os.environ['MUJOCO_GL'] == 'egl'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_building_envs_prints_nothing():
    """Importing a backend and building an env of each writes nothing to stdout or stderr (MuJoCo's C-level
    notice about halfcheetah's model file included)."""
    code = (
        "import marl_envs\n"
        "from marl_envs.backends import brax\n"
        "brax.env_names()\n"  # imports Brax (and MuJoCo's MJX)
        "for name in ('vmas/balance', 'pettingzoo/mpe/simple_spread_v3', 'brax/fast', 'jaxmarl/MPE_simple_spread_v3',\n"
        "             'gymnax/CartPole-v1'):\n"
        "    marl_envs.make(name, num_envs=2).close()\n"
        "marl_envs.make('brax/halfcheetah', num_envs=2).brax_env\n"  # built now even if loaded from the cache
        "marl_envs.make('jaxmarl/halfcheetah_6x1', num_envs=2)\n"  # JaxMARL's MABrax builds a Brax env too
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert (done.stdout, done.stderr) == ("", "")


def test_importing_any_backend_leaves_jax_config_as_it_found_it():
    code = (
        "import jax\n"
        "before = dict(jax.config.values)\n"
        "import marl_envs.backends.jax, marl_envs.backends.brax, marl_envs.backends.jaxmarl\n"
        "import marl_envs.backends.gymnax, marl_envs.backends.vmas, marl_envs.backends.pettingzoo\n"
        "import marl_envs.backends.brax.bench, marl_envs.backends.jaxmarl.bench, marl_envs.backends.gymnax.bench\n"
        "changed = {k: (v, jax.config.values[k]) for k, v in before.items() if jax.config.values[k] != v}\n"
        "assert not changed, changed\n"
        "from jax._src import xla_bridge\n"
        "assert not xla_bridge.backends_are_initialized()\n"  # nor started JAX
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("setup, inline", [
    ("", True),  # building a JAX-family env sets it while JAX's backends are not up
    ("import os; os.environ['MARL_ENVS_JAX_CPU_ASYNC'] = '1'\n", False),  # the user's opt-out
    ("import jax.numpy as jnp; jnp.zeros(1)\n", False),  # JAX already started: its client is left as it is
])
def test_jax_cpu_dispatch_runs_inline_unless_jax_started_or_opted_out(setup, inline):
    code = (
        f"{setup}"
        "import jax, marl_envs\n"
        "marl_envs.make('gymnax/CartPole-v1', num_envs=2)\n"
        "print(jax.config.read('jax_cpu_enable_async_dispatch'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(not inline)


def _import_error_without(library: str, module: str) -> str:
    """What ``import module`` raises in a fresh process where ``library`` cannot be imported."""
    code = (
        "import sys\n"
        f"sys.modules[{library!r}] = None  # as if it were not installed\n"
        "try:\n"
        f"    import {module}\n"
        "except ImportError as err:\n"
        "    print(err)\n"
    )
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout


def test_benchmarl_tasks_without_benchmarl_name_the_extra_and_what_it_replaces():
    out = _import_error_without("benchmarl", "marl_envs.benchmarl")
    assert "marl_envs.benchmarl needs BenchMARL" in out and (
        "pip install 'marl-envs[benchmarl]' (BenchMARL 1.5 pins torchrl < 0.12: TorchRL 0.11 and tensordict 0.11 "
        "replace newer ones)") in out, out


def test_torchrl_interop_without_torchrl_names_the_extra():
    import tensordict

    out = _import_error_without("torchrl", "marl_envs.torchrl")
    assert "marl_envs.torchrl needs TorchRL" in out and (
        f"pip install 'marl-envs[torchrl]' (TorchRL 0.14, which pins tensordict 0.14: it replaces the tensordict "
        f"{tensordict.__version__} installed here if that is another minor version)") in out, out


def test_a_misspelled_name_or_value_is_refused_before_torch_and_jax_are_imported():
    """``make`` runs the backend's declared check first: an unknown JaxMARL env, SMAX map or keyword, an unknown Brax
    physics backend or keyword are refused without importing torch, JAX or the library (seconds each on a small
    CPU)."""
    code = (
        "import sys, marl_envs\n"
        "for name, kwargs, match in [\n"
        "        ('jaxmarl/SMAX', {'scenario': '3mm'}, \"unknown SMAX map '3mm'; did you mean '3m'\"),\n"
        "        ('jaxmarl/SMAX', {'env_kwargs': {'scenario': '2s4z'}}, \"unknown SMAX map '2s4z'\"),\n"
        "        ('jaxmarl/MPE_simple_spred_v3', {}, \"did you mean 'jaxmarl/MPE_simple_spread_v3'\"),\n"
        "        ('jaxmarl/storm', {}, \"'storm' cannot be built here\"),\n"
        "        ('brax/ant', {'backend': 'sprng'}, \"unknown Brax physics backend 'sprng'; did you mean 'spring'\"),\n"
        "        ]:\n"
        "    try:\n"
        "        marl_envs.make(name, num_envs=2, **kwargs)\n"
        "    except ValueError as err:\n"
        "        assert match in str(err), (match, err)\n"
        "    else:\n"
        "        raise AssertionError(f'{name} {kwargs} was built')\n"
        "for kwargs, match in [\n"  # keywords: neither the env's nor the JaxMARL env's
        "        ({'num_env': 4}, \"unexpected keyword argument 'num_env'; did you mean 'num_envs'?\"),\n"
        "        ({'env_kwargs': {'num_agent': 4}}, \"keyword argument 'num_agent'; did you mean 'num_agents'?\"),\n"
        "        ({'env_kwargs': 3}, 'env_kwargs must be a dict of jaxmarl.make keywords, got 3'),\n"
        "        ]:\n"
        "    try:\n"
        "        marl_envs.make('jaxmarl/MPE_simple_spread_v3', **kwargs)\n"
        "    except TypeError as err:\n"
        "        assert match in str(err), (match, err)\n"
        "    else:\n"
        "        raise AssertionError(f'{kwargs} was taken')\n"
        "for kwargs, match in [\n"
        "        ({'num_env': 4}, \"the Brax env 'ant' got an unexpected keyword argument 'num_env'; did you mean\"),\n"
        "        ({'ctrl_cost_weigth': 1.0}, \"argument 'ctrl_cost_weigth'; did you mean 'ctrl_cost_weight'?\"),\n"
        "        ]:\n"
        "    try:\n"
        "        marl_envs.make('brax/ant_4x2', **kwargs)\n"
        "    except TypeError as err:\n"
        "        assert match in str(err), (match, err)\n"
        "    else:\n"
        "        raise AssertionError(f'{kwargs} was taken')\n"
        "heavy = {'torch', 'tensordict', 'jax', 'jaxmarl', 'brax'} & {m.split('.')[0] for m in sys.modules}\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
