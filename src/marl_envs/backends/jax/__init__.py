"""What every JAX env family (Brax, JaxMARL, gymnax, Jumanji, Playground) shares, and a user's JAX env uses.

- ``JaxModel``: one env as pure JAX functions with named outputs (the hook), batched by ``jit(vmap)`` (``_model``).
- ``JaxEnvBase``: the ``EnvBase`` over a ``JaxModel``, with ``jax_functions()`` (``_env``).
- The executor (``_executor``): a reset or step as one compiled call (``_programs``), its outputs one buffer per
  dtype (``_packing``), read by torch as views; and the torch <-> JAX hand-off of the differentiable Brax env
  (``_transfer``).
- JAX settings applied when the first env is built: the compilation cache, the CPU dispatch and the GPU memory
  shared with torch (``_runtime``).

A family (``marl_envs.backends.gymnax``, ``jaxmarl``, ``brax``, ...) imports from this package only.
"""

from .. import lazy_names

#: Each public name and the module that defines it, imported when the name is first read: the registry walks
#: ``marl_envs.backends`` importing every package, and a helper package imports nothing heavy (JAX, torch) then.
_SOURCES = {
    "._model": ("JaxModel", "ModelLayout", "StateMismatch", "env_keys", "export_platform", "quiet_tracing",
                "split_key", "strong", "tree_paths"),
    "._packing": ("StatePacking",),
    "._env": ("FunctionalState", "JaxEnvBase", "JaxFunctions", "check_name"),
    "._runtime": ("ASYNC_VAR", "CACHE_DIR_VAR", "JAX_GPU_MEMORY_VARS", "OPT_OUT_VAR", "PREALLOCATE_VAR",
                  "caching_enabled", "configure_jax", "enable_compilation_cache", "env_flag", "inline_cpu_dispatch",
                  "jax_started", "share_gpu_memory"),
    "._transfer": ("Transfer",),
}
__all__ = sorted(name for names in _SOURCES.values() for name in names)
__getattr__, __dir__ = lazy_names(__name__, _SOURCES)
