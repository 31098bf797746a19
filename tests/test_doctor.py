"""marl-envs doctor: versions, devices, each installed backend built and stepped, the JAX -> torch hand-off, JAX's
GPU memory settings; a broken backend is a failed row and a non-zero exit status."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import marl_envs
from marl_envs.cli import EXIT_ERROR, EXIT_OK, main

HAS = {backend: marl_envs.backend_installed(backend) for backend in marl_envs.available_backends()}


def _rows(out: str) -> dict[tuple[str, str], tuple[str, str]]:
    """(check, where) -> (status, detail) of the report's table."""
    rows = {}
    for line in out.splitlines():
        cells = line.split(None, 3)
        if len(cells) == 4 and cells[2] in ("ok", "FAIL", "-"):
            rows[cells[0], cells[1]] = (cells[2], cells[3])
    return rows


@pytest.mark.skipif(not (HAS["vmas"] and HAS["gymnax"]), reason="checks the vmas and gymnax backends")
def test_doctor_passes_where_backends_work(capsys):
    assert main(["doctor", "--backend", "vmas", "--backend", "gymnax", "--device", "cpu"]) == EXIT_OK
    out = capsys.readouterr().out
    rows = _rows(out)
    assert rows["vmas", "cpu"][0] == "ok" and rows["vmas", "cpu"][1].startswith("vmas/balance: reset + 3 steps")
    assert rows["gymnax", "cpu"][0] == "ok"
    assert rows["jax->torch", "cpu"][0] == "ok"  # zero-copy on the CPU too: a NumPy view
    assert rows["jax->torch", "cpu"][1].startswith("zero-copy (a NumPy view of JAX's buffer)")
    assert rows["jax-memory", "XLA_PYTHON_CLIENT_PREALLOCATE"][0] == "-"
    assert out.rstrip().endswith("all checks passed")


def test_unknown_backend_is_refused(capsys):
    assert main(["doctor", "--backend", "vmsa"]) == EXIT_ERROR
    assert "unknown backend 'vmsa'; did you mean 'vmas'?" in capsys.readouterr().err


@pytest.mark.skipif(not HAS["vmas"], reason="breaks the vmas backend")
def test_a_broken_backend_is_a_failed_row_and_exit_status_1(tmp_path):
    fake = tmp_path / "vmas"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise RuntimeError('this vmas is broken')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    run = subprocess.run([sys.executable, "-m", "marl_envs.cli", "doctor", "--backend", "vmas"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == EXIT_ERROR, run.stdout + run.stderr
    status, detail = _rows(run.stdout)["vmas", "cpu"]
    assert status == "FAIL" and detail.startswith("RuntimeError: this vmas is broken")
    assert run.stdout.rstrip().endswith("1 check(s) failed: vmas on cpu")


@pytest.mark.skipif(not HAS["gymnax"], reason="builds a JAX-family env")
@pytest.mark.parametrize("environ, expected", [
    ({}, "false"),  # torch sees a GPU, the user chose nothing: JAX allocates as it needs
    ({"MARL_ENVS_JAX_PREALLOCATE": "1"}, None),  # the opt-out: JAX's default
    ({"XLA_PYTHON_CLIENT_MEM_FRACTION": ".5"}, None),  # the user's own setting stands
], ids=["default", "opt-out", "user-set"])
def test_jax_gpu_memory_default_beside_torch(environ, expected):
    script = textwrap.dedent("""
        import os, torch
        torch.cuda.is_available = lambda: True  # as on a machine where torch sees a GPU
        import marl_envs
        marl_envs.make("gymnax/CartPole-v1", num_envs=1)
        print(os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"))
    """)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("XLA_") and k != "MARL_ENVS_JAX_PREALLOCATE"}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env={**clean, **environ})
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[-1] == str(expected)


def test_every_backend_has_its_check_env():
    """``marl-envs doctor`` with no ``--backend`` checks every backend: each has an env to build, and that env is
    one of the backend's names."""
    from marl_envs import doctor

    assert list(doctor.ENVS) == marl_envs.available_backends()
    for backend, (name, _) in doctor.ENVS.items():
        assert name.partition("/")[0] == backend


def test_the_host_wait_check_needs_a_gpu():
    """The check keeps the GPU busy with a kernel and times the host: it runs on CUDA devices only (the GPU check
    in the docs ran it); on the CPU it says so."""
    from marl_envs.doctor import host_wait, run

    with pytest.raises(ValueError, match=r"the host-wait check needs a CUDA device \(a kernel that keeps the GPU busy\), "
                                         r"got 'cpu'"):
        host_wait("gymnax/CartPole-v1", {}, "cpu")
    report = run(backends=["gymnax"], devices=["cpu"])
    assert not [row for row in report.rows if row.check == "host-wait"]
