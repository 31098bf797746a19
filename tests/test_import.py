import subprocess
import sys


def test_import_marl_envs_imports_no_backend():
    code = (
        "import sys, marl_envs, marl_envs.distributed\n"
        "heavy = {'jax', 'brax', 'vmas', 'pettingzoo', 'mpe2'} & {m.split('.')[0] for m in sys.modules}\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
