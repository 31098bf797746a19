"""Brax envs built by name, kept on disk as ``jax.export`` modules: a later process skips Brax altogether.

JAX's persistent compilation cache saves the XLA compilation, but each process still imports Brax (and MuJoCo,
MJX, trimesh ...), builds the robot from its MJCF file and traces the reset and step, which on a small CPU costs
more than the rest of a warm start together. So ``BraxEnv`` saves, next to JAX's cache, what it traced for a
name: the reset and step as serialized ``jax.export`` modules and the plain data the torch side needs (shapes,
the agent mapping). A process asking for the same env with the same arguments loads them, compiles them (a
persistent-cache hit: the first process compiled the same modules) and never imports Brax, unless something
needs the Brax env itself (``render``, ``env.brax_env``), which is then built on first use.

A saved env is found by a key hashing everything its compiled functions depend on: the env name and every
argument that reaches the JAX side (keywords for the Brax env, ``frame_skip``, mapping, group map, device
platform), JAX's configuration flags that change tracing, the versions of JAX, jaxlib, Brax,
MuJoCo and NumPy, Brax's installed files (their hashes, from its wheel's ``RECORD``) and the source of this
backend and of ``groupings``. Nothing is saved or loaded when that cannot be pinned down: Brax installed in
editable mode, keywords that are not plain JSON values, or a Brax env name re-registered by user code. Files
are written atomically (a temporary file renamed), so concurrent processes are safe; an unreadable file
counts as a miss and is replaced. File names start with a digest of the installation; saving deletes the files
of other installations (older code or library versions) that nothing loaded for a week.

``num_envs`` is not in the key: the modules take any batch size (their batch dim is symbolic), so an env built
again with another ``num_envs`` loads them too, importing no Brax and tracing nothing. XLA still compiles the
loaded modules for each batch size (static shapes); JAX's persistent cache keeps each such
compilation, so a batch size seen before loads it from disk.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.metadata
import json
import os
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax

from groupings import MarlGroupMapType

from ..jax import caching_enabled

__all__ = ["Program", "directory", "env_key", "load", "path", "save"]

FORMAT = 2  # 2: one file for every num_envs (the modules' batch dim is symbolic)
SUBDIR = "marl_envs-exported"
STALE_DAYS = 7  # an env saved by another installation and not loaded for this long is deleted
_PACKAGES_HASHED = ("brax", "jax")  # our packages the compiled functions come from (backends/<name>)
_PACKAGES = ("jax", "jaxlib", "brax", "mujoco", "numpy")
_JAX_FLAGS = ("jax_enable_x64", "jax_default_matmul_precision", "jax_default_prng_impl",
              "jax_threefry_partitionable", "jax_numpy_rank_promotion", "jax_numpy_dtype_promotion")


def _plain(value: Any) -> bool:
    """A JSON value (tuples count as lists), nothing whose ``json.dumps`` could hide a difference."""
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return value == value and abs(value) != float("inf")
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


@functools.cache
def _installation() -> str | None:
    """A digest of the installed code the compiled functions come from; None if Brax is not a wheel install."""
    import groupings  # the default group map decides the split's column order

    digest = hashlib.sha256()
    backends = Path(__file__).parent.parent
    sources = [file for package in _PACKAGES_HASHED for file in sorted((backends / package).glob("*.py"))]
    for file in [*sources, Path(groupings.__file__)]:
        digest.update(file.read_bytes())
    for package in _PACKAGES:
        try:
            digest.update(f"{package}=={importlib.metadata.version(package)};".encode())
        except importlib.metadata.PackageNotFoundError:
            digest.update(f"{package} missing;".encode())
    try:
        brax = importlib.metadata.distribution("brax")
    except importlib.metadata.PackageNotFoundError:
        return None
    record, direct = brax.read_text("RECORD"), brax.read_text("direct_url.json")
    if not record or (direct and json.loads(direct).get("dir_info", {}).get("editable")):
        return None  # an editable or unusual install: its code can change under the same version
    digest.update(record.encode())
    return digest.hexdigest()


def _user_registered(robot: str) -> bool:
    """True if user code replaced Brax's env ``robot`` (only possible once Brax is imported)."""
    cls = getattr(sys.modules.get("brax.envs"), "_envs", {}).get(robot)
    return cls is not None and not getattr(cls, "__module__", "").startswith("brax.")


def env_key(name: Any, robot: str, device, *, env_kwargs: dict[str, Any], frame_skip: int, mapping: Any,
            group_map: Any) -> str | None:
    """The file name (a hex digest) for an env of Brax env ``robot`` built by name (``BraxEnv``) with these
    arguments, of any ``num_envs``; None if such an env must not be saved (see the module docstring)."""
    if not isinstance(name, str):
        return None
    group_map = MarlGroupMapType.coerce(group_map)
    if isinstance(group_map, MarlGroupMapType):
        group_map = f"{type(group_map).__name__}.{group_map.name}"
    arguments = dict(name=name, env_kwargs=env_kwargs, frame_skip=frame_skip, mapping=mapping, group_map=group_map)
    installation = _installation()
    if installation is None or not _plain(arguments) or _user_registered(robot):
        return None
    material = {
        "format": FORMAT,
        "installation": installation,
        "jax": {flag: str(getattr(jax.config, flag, None)) for flag in _JAX_FLAGS},
        "device": [device.platform, device.device_kind],
        "robot": robot,
        **arguments,
    }
    return f"{installation[:16]}-{hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()}"


@dataclass(frozen=True)
class Program:
    """What ``BraxWrapper`` compiles: a Brax env and its shapes, or (``exported``: the saved reset and step) a
    zero-argument callable building the env on demand; ``export``: trace as ``jax.export`` modules to save."""

    env: Any
    info: Any  # ModelInfo
    exported: dict[str, Any] | None = None
    export: bool = False


def directory() -> Path | None:
    """Where saved envs go: a folder inside JAX's compilation cache directory; None when caching is off
    (``MARL_ENVS_JAX_CACHE=0``, no JAX cache directory, or a remote one)."""
    cache = jax.config.jax_compilation_cache_dir
    if not cache or "://" in str(cache) or not caching_enabled():
        return None
    return Path(cache) / SUBDIR


def path(name: str) -> Path | None:
    """The file of the env saved under ``name`` (None when caching is off)."""
    folder = directory()
    return None if folder is None else folder / f"{name}.json"


def load(name: str) -> tuple[dict, dict[str, Any]] | None:
    """``(metadata, {"batched_reset": Exported, "batched_step": Exported})`` saved under ``name``, or None (a miss)."""
    file = path(name)
    if file is None:
        return None
    try:
        data = json.loads(file.read_text())
        if data["format"] != FORMAT:
            return None
        os.utime(file)  # in use: see _prune
        exported = {k: jax.export.deserialize(bytearray(base64.b64decode(v))) for k, v in data["exported"].items()}
        return data["meta"], exported
    except Exception:  # missing, half-written by an older crash, or unreadable: rebuild and overwrite
        return None


def save(name: str, meta: dict, exported: dict[str, Any]) -> Path | None:
    """Write ``meta`` and the ``exported`` modules under ``name``; warn (once per call) if that fails."""
    target = path(name)
    if target is None:
        return None
    folder = target.parent
    try:
        payload = {"format": FORMAT, "meta": meta,
                   "exported": {k: base64.b64encode(e.serialize()).decode() for k, e in exported.items()}}
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as file:
                json.dump(payload, file)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except (OSError, ImportError) as err:  # ImportError: jax.export serialization needs flatbuffers
        warnings.warn(
            f"could not save the compiled Brax env to {target} ({err}); every process will trace it again. "
            f"Set MARL_ENVS_JAX_CACHE_DIR to a writable folder, or MARL_ENVS_JAX_CACHE=0 to stop caching",
            RuntimeWarning, stacklevel=3,
        )
        return None
    _prune(folder, name.partition("-")[0])
    return target


def _prune(folder: Path, installation: str) -> None:
    """Delete envs saved by other installations (older code or library versions) and unused for a week."""
    cutoff = time.time() - STALE_DAYS * 86400
    for file in folder.glob("*.json"):
        if not file.name.startswith(installation + "-"):
            try:
                if file.stat().st_mtime < cutoff:
                    file.unlink()
            except OSError:  # another process pruned it first
                pass
