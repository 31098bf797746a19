import subprocess
import sys


def test_import_marl_envs_imports_no_backend():
    code = (
        "import sys, marl_envs\n"
        "heavy = {'jax', 'brax', 'vmas', 'pettingzoo', 'mpe2', 'torchrl'} & {m.split('.')[0] for m in sys.modules}\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_torchrl_interop_without_torchrl_names_the_extra():
    code = (
        "import sys\n"
        "sys.modules['torchrl'] = None  # as if TorchRL were not installed\n"
        "try:\n"
        "    import marl_envs.torchrl\n"
        "except ImportError as err:\n"
        "    print(err)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert "marl_envs.torchrl needs TorchRL" in out and "pip install 'marl-envs[torchrl]'" in out, out

