import json
import subprocess
import sys

import pytest

import marl_envs
from marl_envs import registry
from marl_envs._core import names as _names


@pytest.mark.parametrize("backend", registry.available_backends())
def test_snapshot_is_the_live_list_of_the_installed_versions(backend):
    """One live listing per backend (imports it); the snapshot must hold the installed versions and their names."""
    if not registry.backend_installed(backend):
        pytest.skip(f"{backend} is not installed")
    versions = _names.stamp(registry._BACKENDS[backend].extra)
    live = {"versions": versions, "names": registry._live_names(backend)}
    assert _names.SNAPSHOT.get(backend) == live, "stale snapshot: run python scripts/snapshot_env_names.py"


def test_listing_known_versions_imports_no_backend():
    code = (
        "import sys\n"
        "from marl_envs import registry\nfrom marl_envs._core import names as _names\n"
        "for b in registry.available_backends():\n"
        "    _names.SNAPSHOT[b] = {'versions': _names.stamp(registry._BACKENDS[b].extra), 'names': [b + '/listed']}\n"
        "import marl_envs\n"
        "names = marl_envs.available_envs()\n"
        "heavy = {'jax', 'brax', 'vmas', 'pettingzoo', 'mpe2', 'jaxmarl', 'gymnax'}\n"
        "heavy &= {m.split('.')[0] for m in sys.modules}\n"
        "assert not heavy, heavy\n"
        "installed = [b + '/listed' for b in registry.available_backends() if registry.backend_installed(b)]\n"
        "assert names == sorted(installed), names\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.fixture
def fake_vmas(monkeypatch, tmp_path):
    """``vmas`` installed (as ``json``), its names listed live by a counting stand-in, an empty snapshot and a
    cache under ``tmp_path`` (``XDG_CACHE_HOME``)."""
    calls = []

    def live(backend):
        calls.append(backend)
        return [f"{backend}/live_{len(calls)}"]

    monkeypatch.setitem(registry._BACKENDS, "vmas", registry.Backend("marl_envs.backends.vmas", ("json",), "vmas"))
    monkeypatch.setattr(registry, "_NAME_CACHE", {})
    monkeypatch.setattr(registry, "_live_names", live)
    monkeypatch.setattr(_names, "SNAPSHOT", {})
    monkeypatch.setattr(_names, "stamp", lambda extra: {"vmas": "1.0"})
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return calls


def test_names_of_a_new_version_are_listed_once_then_cached(fake_vmas, monkeypatch, tmp_path):
    assert marl_envs.available_envs("vmas") == ["vmas/live_1"]
    path = tmp_path / "marl_envs" / "names" / "vmas.json"
    assert _names.cache_path("vmas") == path
    assert json.loads(path.read_text()) == {"marl_envs": marl_envs.__version__, "versions": {"vmas": "1.0"},
                                            "names": ["vmas/live_1"]}
    monkeypatch.setattr(registry, "_NAME_CACHE", {})  # a new process
    assert marl_envs.available_envs("vmas") == ["vmas/live_1"] and fake_vmas == ["vmas"]
    monkeypatch.setattr(registry, "_NAME_CACHE", {})
    monkeypatch.setattr(_names, "stamp", lambda extra: {"vmas": "2.0"})  # an upgrade: listed again
    assert marl_envs.available_envs("vmas") == ["vmas/live_2"]
    assert json.loads(path.read_text())["versions"] == {"vmas": "2.0"}


def test_cache_of_another_marl_envs_version_or_unreadable_is_listed_again(fake_vmas, monkeypatch, tmp_path):
    path = _names.cache_path("vmas")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"marl_envs": "0.0.0", "versions": {"vmas": "1.0"}, "names": ["vmas/old"]}))
    assert marl_envs.available_envs("vmas") == ["vmas/live_1"]
    monkeypatch.setattr(registry, "_NAME_CACHE", {})
    path.write_text("{not json")
    assert marl_envs.available_envs("vmas") == ["vmas/live_2"]


def test_snapshot_of_the_installed_versions_is_used(fake_vmas, monkeypatch):
    monkeypatch.setattr(_names, "SNAPSHOT", {"vmas": {"versions": {"vmas": "1.0"}, "names": ["vmas/snapshot"]}})
    assert marl_envs.available_envs("vmas") == ["vmas/snapshot"] and fake_vmas == []
    assert not _names.cache_path("vmas").exists()


def test_without_metadata_names_are_listed_live_and_not_cached(fake_vmas, monkeypatch):
    monkeypatch.setattr(_names, "stamp", lambda extra: None)  # marl-envs not installed (a source tree)
    assert marl_envs.available_envs("vmas") == ["vmas/live_1"]
    assert not _names.cache_path("vmas").exists()


def test_stamp_holds_what_the_extra_installs():
    """``pettingzoo[classic,butterfly,sisl]`` brings what its families need: a missing one drops a family."""
    if _names.stamp("vmas") is None:
        pytest.skip("marl-envs is not installed")
    assert set(_names.stamp("vmas")) == {"vmas"}
    assert {"pettingzoo", "mpe2"} <= set(_names.stamp("pettingzoo"))
    if registry.backend_installed("pettingzoo"):
        assert {"rlcard", "chess", "pymunk", "scipy"} <= set(_names.stamp("pettingzoo"))
