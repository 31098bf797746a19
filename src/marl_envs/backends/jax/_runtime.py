"""Settings of JAX every JAX family shares, applied when the first env that needs them is built, never at import.

- **The persistent compilation cache** (``enable_compilation_cache``): compilations are kept on disk, so a second
  process building the same env loads them. ``MARL_ENVS_JAX_CACHE=0`` opts out, ``MARL_ENVS_JAX_CACHE_DIR`` moves it;
  a cache directory the user gave JAX is kept.
- **JAX's CPU dispatch** (``inline_cpu_dispatch``): ``jax_cpu_enable_async_dispatch=False``, so that JAX runs its CPU
  computations on the calling thread. JAX reads that flag once, when it starts its CPU backend, so it can only be
  set before the process's first JAX computation, for the whole process: it is set when the first JAX-family env
  is built on the CPU, if JAX has not started yet, and ``MARL_ENVS_JAX_CPU_ASYNC=1`` opts out. A program that ran
  JAX before building an env keeps JAX's default.
- **GPU memory shared with torch** (``share_gpu_memory``): by default JAX takes 75% of a GPU's memory when it starts
  its GPU backend, whichever device the env is on, and torch in the same process then runs out. Where torch sees a
  CUDA GPU, ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` is set before JAX starts (JAX then allocates as it needs and
  frees), unless the user set any of JAX's GPU memory variables (``JAX_GPU_MEMORY_VARS``) or
  ``MARL_ENVS_JAX_PREALLOCATE=1``. ``marl-envs doctor`` shows what is in force.
"""

from __future__ import annotations

import os

import jax
import torch

from ..._core.names import user_cache

__all__ = ["ASYNC_VAR", "CACHE_DIR_VAR", "JAX_GPU_MEMORY_VARS", "OPT_OUT_VAR", "PREALLOCATE_VAR", "caching_enabled",
           "configure_jax", "enable_compilation_cache", "env_flag", "inline_cpu_dispatch", "jax_started",
           "share_gpu_memory"]

CACHE_DIR_VAR = "MARL_ENVS_JAX_CACHE_DIR"
OPT_OUT_VAR = "MARL_ENVS_JAX_CACHE"


def env_flag(name: str, default: str) -> bool:
    """An on/off environment variable: off when set (or defaulting) to 0, false, off or no, else on."""
    return os.environ.get(name, default).strip().lower() not in ("0", "false", "off", "no")


def caching_enabled() -> bool:
    """False if the user opted out (``MARL_ENVS_JAX_CACHE`` set to 0, false, off or no)."""
    return env_flag(OPT_OUT_VAR, "1")


ASYNC_VAR = "MARL_ENVS_JAX_CPU_ASYNC"


def jax_started() -> bool | None:
    """Whether JAX has started its backends (then its flags and memory settings are fixed); None if JAX moved the
    function that tells."""
    try:
        from jax._src import xla_bridge
        return xla_bridge.backends_are_initialized()
    except (ImportError, AttributeError):
        return None


PREALLOCATE_VAR = "MARL_ENVS_JAX_PREALLOCATE"
#: JAX's GPU memory settings, read once when it starts its GPU backend (what each means: ``marl-envs doctor``).
JAX_GPU_MEMORY_VARS = {
    "XLA_PYTHON_CLIENT_PREALLOCATE": "take a block of the GPU's memory at start (JAX's default: true)",
    "XLA_CLIENT_MEM_FRACTION": "the fraction of the GPU's memory that block is (JAX's default: 0.75)",
    "XLA_PYTHON_CLIENT_MEM_FRACTION": "the same, under its older name",
    "XLA_PYTHON_CLIENT_ALLOCATOR": "'platform' allocates and frees exactly what is used (slow); JAX's default: bfc",
}


def share_gpu_memory() -> bool:
    """Set ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` where torch sees a CUDA GPU and JAX has not started; return
    whether it was set here.

    Left alone when JAX has started, when the user set any of ``JAX_GPU_MEMORY_VARS`` (their choice stands) or
    ``MARL_ENVS_JAX_PREALLOCATE=1`` (JAX's default then: 75% of the GPU taken at start).
    """
    if env_flag(PREALLOCATE_VAR, "0") or any(var in os.environ for var in JAX_GPU_MEMORY_VARS):
        return False
    if jax_started() is not False or not torch.cuda.is_available():
        return False
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    return True


def inline_cpu_dispatch() -> bool:
    """Have JAX run its CPU computations on the calling thread (``jax_cpu_enable_async_dispatch=False``), if JAX
    has not started its backends yet; return whether JAX's CPU computations run so.

    Each step of a JAX-family env reads its results at once, so JAX's asynchronous CPU dispatch buys the torch
    side little overlap, and costs a hand-off to JAX's worker thread and back every call. Nothing is changed once
    JAX's backends are up (the user's JAX program chose) or with ``MARL_ENVS_JAX_CPU_ASYNC=1``.
    """
    started = jax_started()
    if started is None:  # JAX moved it: leave JAX's default
        return False
    if not started and not env_flag(ASYNC_VAR, "0"):
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    return not jax.config.read("jax_cpu_enable_async_dispatch")


def enable_compilation_cache() -> str | None:
    """Switch on JAX's persistent compilation cache; return its directory.

    The directory is ``$MARL_ENVS_JAX_CACHE_DIR`` (default ``${XDG_CACHE_HOME:-~/.cache}/marl_envs/jax``;
    compilations over 0.2 s are kept). Does nothing (and returns JAX's own directory, or None) if JAX already
    has one or ``MARL_ENVS_JAX_CACHE=0``.
    """
    current = jax.config.jax_compilation_cache_dir
    if current or not caching_enabled():
        return current or None
    path = os.environ.get(CACHE_DIR_VAR) or str(user_cache("jax"))
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
    return path


def configure_jax() -> bool:
    """Apply the settings (``share_gpu_memory``, ``inline_cpu_dispatch``, ``enable_compilation_cache``) before
    marl_envs first runs JAX: when a JAX-family env is built, or its library first imported by marl_envs. Returns
    whether JAX's CPU computations run on the calling thread."""
    share_gpu_memory()
    inline = inline_cpu_dispatch()
    enable_compilation_cache()
    return inline
