"""The env catalogue: one page per registered env, generated from the registry at every docs build.

Each entry (group map, the key / shape / dtype / spec table ``marl-envs info`` prints, the env's own keywords
and their defaults, and a picture rendered from the env after a few random steps) is computed by this file
run as a script, one process per backend (their renderers, pyglet, MuJoCo and pygame, never share a process),
and cached in ``docs/_build/render-cache`` under a key of everything that determines it: the env name, the
settings below, the versions of the backend's libraries and the source of marl_envs, groupings and this file.
A rebuild with unchanged envs reads the cache and renders nothing.

Run by hand: ``python docs/_ext/env_catalogue.py CACHE_DIR NAME ...`` computes the entries of NAME ... .
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent
ROOT = DOCS.parent
SRC = ROOT / "src"
OUT = DOCS / "envs"  # generated, git-ignored
CACHE = DOCS / "_build" / "render-cache"

#: How every env is built and pictured: a small batch, a fixed seed, a few random steps.
SETTINGS = {"num_envs": 2, "seed": 0, "steps": 8, "max_side": 360, "gif_frames": 40, "gif_side": 280}
#: Envs pictured with a short GIF rather than a PNG.
SHOWCASE = {
    "vmas/balance", "vmas/navigation", "vmas/football", "brax/ant_4x2", "pettingzoo/butterfly/pistonball_v6",
    "pettingzoo/mpe/simple_spread_v3",
}
#: The third-party distributions whose versions determine each backend's entries.
DISTRIBUTIONS = {
    "vmas": ("vmas", "pyglet", "torch"),
    "brax": ("brax", "jax", "mujoco", "torch"),
    "pettingzoo": ("pettingzoo", "mpe2", "pygame-ce", "torch"),
    "jaxmarl": ("jaxmarl", "jax", "torch"),
    "gymnax": ("gymnax", "jax", "torch"),
    "jumanji": ("jumanji", "jax", "torch"),
    "playground": ("playground", "brax", "jax", "mujoco", "torch"),
    "openspiel": ("open-spiel", "pettingzoo", "torch"),
    "magent2": ("magent2", "pettingzoo", "pygame-ce", "torch"),
    "mamujoco": ("gymnasium-robotics", "mujoco", "pettingzoo", "torch"),
    "lbforaging": ("lbforaging", "pettingzoo", "pyglet", "torch"),
    "rware": ("rware", "pettingzoo", "pyglet", "torch"),
}
BACKEND_TITLES = {"vmas": "VMAS", "brax": "Brax", "pettingzoo": "PettingZoo", "jaxmarl": "JaxMARL", "gymnax": "gymnax",
                  "jumanji": "Jumanji", "playground": "MuJoCo Playground", "openspiel": "OpenSpiel",
                  "magent2": "MAgent2", "mamujoco": "MaMuJoCo",
                  "lbforaging": "Level-Based Foraging", "rware": "RWARE"}
#: The docs page of each backend (relative to ``docs/``).
BACKEND_PAGES = {"vmas": "backends/vmas.md", "brax": "backends/brax.md", "pettingzoo": "backends/pettingzoo.md",
                 "jaxmarl": "jax_families.md", "gymnax": "jax_families.md", "jumanji": "jax_families.md",
                 "playground": "jax_families.md",
                 **dict.fromkeys(
                     ("openspiel", "magent2", "mamujoco", "lbforaging", "rware"), "backends/cpu_families.md")}
#: Backends built on the PettingZoo machinery: their instances draw frames only if built with ``render_mode``.
PETTINGZOO_MACHINERY = ("pettingzoo", "openspiel", "magent2", "mamujoco", "lbforaging", "rware")
#: Packages of ``marl_envs.backends`` besides the backend's own (``<backend>.py`` or ``<backend>/``) whose code a
#: backend's entries run.
SHARED_SOURCES = {"brax": ("jax",), "jaxmarl": ("jax",), "gymnax": ("jax",), "jumanji": ("jax",),
                  "playground": ("jax", "brax"),
                  **{backend: ("pettingzoo",) for backend in PETTINGZOO_MACHINERY[1:]}}


# --------------------------------------------------------------------------------------------------
# Cache keys
# --------------------------------------------------------------------------------------------------
def stem(name: str) -> str:
    """``pettingzoo/mpe/simple_v3`` -> ``mpe-simple_v3``, ``brax/humanoid_9|8`` -> ``humanoid_9-8``: the file
    name of an env's page (in its backend's folder) and picture."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name.partition("/")[2].replace("/", "-"))


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _source_digest(backend: str) -> str:
    """Digest of the code an entry of ``backend`` runs: marl_envs' core, its backend files, groupings and the
    functions of this file that compute entries (not those that write pages)."""
    package = SRC / "marl_envs"
    files = sorted(package.glob("*.py")) + sorted((SRC / "groupings").rglob("*.py"))
    backends = package / "backends"
    files += sorted(backends.glob(f"{backend}.py"))
    for folder in (backend, *SHARED_SOURCES.get(backend, ())):
        files += sorted((backends / folder).glob("*.py"))
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    # this file's part (not the pages)
    for function in (compute_entry, _picture, _frame, _fit, _env_keywords, _rest_pose):
        digest.update(inspect.getsource(function).encode())
    return digest.hexdigest()


def entry_keys(names: list[str]) -> dict[str, str]:
    """Cache key of each name's entry."""
    per_backend: dict[str, dict] = {}
    keys = {}
    for name in names:
        backend = name.partition("/")[0]
        if backend not in per_backend:
            per_backend[backend] = {
                "versions": {d: _version(d) for d in DISTRIBUTIONS.get(backend, ())},
                "source": _source_digest(backend),
            }
        blob = json.dumps({"name": name, "settings": SETTINGS, "gif": name in SHOWCASE, **per_backend[backend]},
                          sort_keys=True)
        keys[name] = hashlib.sha256(blob.encode()).hexdigest()[:20]
    return keys


# --------------------------------------------------------------------------------------------------
# Computing one entry (run in a subprocess per backend)
# --------------------------------------------------------------------------------------------------
def _env_keywords(env, backend: str) -> tuple[list[tuple[str, str]], str]:
    """The env's own keywords with their defaults, and where they were read from."""
    if backend == "vmas":
        # Every method of the scenario class (football reads its keywords outside make_world).
        source = "\n".join(inspect.getsource(f) for f in vars(type(env.scenario)).values() if inspect.isfunction(f))
        found = re.findall(r"kwargs\.(?:pop|get)\(\s*[\"'](\w+)[\"']\s*(?:,\s*([^()\n]*?(?:\([^()\n]*\))?[^()\n]*?))?\)",
                           source)
        seen: dict[str, str] = {}
        for key, default in found:
            seen.setdefault(key, default.strip() if default else "None")
        return list(seen.items()), "read from the scenario's source (its kwargs.pop / kwargs.get calls)"
    if backend == "gymnax":
        fields = getattr(env.env_params, "__dataclass_fields__", {})
        return ([(name, repr(getattr(env.env_params, name))) for name in fields],
                "the fields of its EnvParams (pass them as env_params={...})")
    if backend == "playground":
        config = env.playground_env._config
        return ([(name, repr(config[name])) for name in sorted(config)],
                "the fields of its config (pass them as config={...}; impl is 'jax' here)")
    if backend in ("brax", "jaxmarl", "jumanji"):
        unwrapped = {"brax": lambda: env.brax_env.unwrapped, "jaxmarl": lambda: env.jaxmarl_env,
                     "jumanji": lambda: env.jumanji_env}[backend]()
        target = type(unwrapped).__init__
        where = f"the signature of {type(unwrapped).__name__}.__init__"
    else:  # the PettingZoo machinery: the task's own keywords
        keywords = env.task_spec.own_keywords() or {}
        return ([(name, "required" if default is inspect.Parameter.empty else repr(default))
                 for name, default in keywords.items()], f"the keywords of {backend} task {env.task!r}")
    params = []
    for param in inspect.signature(target).parameters.values():
        if param.name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        params.append((param.name, "required" if param.default is param.empty else repr(param.default)))
    return params, where


def _fit(frame, side: int):
    from PIL import Image

    image = Image.fromarray(frame)
    image.thumbnail((side, side))
    return image


def _frame(env):
    import numpy as np

    frame = env.render(0)
    if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[-1] not in (3, 4):
        raise RuntimeError(f"render() returned {type(frame).__name__} "
                           f"{getattr(frame, 'shape', '')}, not an (H, W, 3) image")
    return np.ascontiguousarray(frame[..., :3])


#: Backends pictured at their model's rest pose, drawn by MuJoCo from the model: their MJX reset and step compile
#: for a minute each on a CPU, too long for every page of the catalogue.
REST_POSE = ("playground",)


def _rest_pose(model):
    """An image of a MuJoCo model at its rest pose (``qpos0``)."""
    import mujoco
    import numpy as np

    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    renderer = mujoco.Renderer(model, height=240, width=320)
    try:
        renderer.update_scene(data)
        return np.asarray(renderer.render(), dtype=np.uint8)
    finally:
        renderer.close()


def _picture(env, name: str, folder: Path) -> tuple[str | None, str | None]:
    """Render env 0 of ``env`` after a few random steps into ``folder``: (file name, None) or (None, why not)."""
    try:
        if name.partition("/")[0] in REST_POSE:
            _fit(_rest_pose(env.playground_env.mj_model), SETTINGS["max_side"]).save(folder / "picture.png",
                                                                                     optimize=True)
            return "picture.png", None
        env.set_seed(SETTINGS["seed"])
        td = env.reset()
        for _ in range(SETTINGS["steps"]):
            _, td = env.step_and_maybe_reset(env.rand_action(td))
        if name not in SHOWCASE:
            _fit(_frame(env), SETTINGS["max_side"]).save(folder / "picture.png", optimize=True)
            return "picture.png", None
        frames = []
        for _ in range(SETTINGS["gif_frames"]):
            frames.append(_fit(_frame(env), SETTINGS["gif_side"]))
            _, td = env.step_and_maybe_reset(env.rand_action(td))
        frames[0].save(folder / "picture.gif", save_all=True, append_images=frames[1:], duration=80, loop=0,
                       optimize=True)
        return "picture.gif", None
    except Exception as err:  # the page says why: an env that cannot render is documented as such
        return None, f"{type(err).__name__}: {err}"


def compute_entry(name: str, folder: Path) -> dict:
    """Build ``name``, describe it and picture it (one env for both); the picture goes into ``folder``."""
    import marl_envs
    from marl_envs._format import GROUP_HEADERS, SPEC_HEADERS, group_rows, spec_rows

    backend = name.partition("/")[0]
    start = time.perf_counter()
    build = {"num_envs": SETTINGS["num_envs"], "seed": SETTINGS["seed"]}
    if backend in PETTINGZOO_MACHINERY:  # PettingZoo draws frames only when asked at construction
        try:
            env = marl_envs.make(name, render_mode="rgb_array", **build)
            build["render_mode"] = "rgb_array"
        except (ValueError, TypeError):  # no frames: Level-Based Foraging draws in a window, OpenSpiel only text
            env = marl_envs.make(name, **build)
    else:
        env = marl_envs.make(name, **build)
    try:
        entry = {
            "name": name,
            "backend": backend,
            "build": build,
            "repr": repr(env),
            "group_map": env.group_map,
            "group_table": [GROUP_HEADERS, [list(map(str, row)) for row in group_rows(env)]],
            "spec_table": [SPEC_HEADERS, [list(map(str, row)) for row in spec_rows(env)]],
        }
        entry["keywords"], entry["keywords_from"] = _env_keywords(env, backend)
        entry["picture"], entry["no_picture"] = _picture(env, name, folder)
    finally:
        env.close()
    entry["seconds"] = round(time.perf_counter() - start, 2)
    return entry


def main(argv: list[str]) -> int:
    """``CACHE_DIR KEY=NAME ...``: compute and cache each entry, with a progress bar."""
    import warnings

    from tqdm import tqdm

    warnings.simplefilter("ignore")  # third-party chatter (deprecations, pygame's banner) is not the docs'
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    cache = Path(argv[0])
    pairs = [arg.partition("=")[::2] for arg in argv[1:]]
    backend = pairs[0][1].partition("/")[0] if pairs else ""
    failed = 0
    bar = tqdm(pairs, desc=f"catalogue: {backend}", unit="env", file=sys.stderr, dynamic_ncols=True)
    for key, name in bar:
        bar.set_postfix_str(name)
        final = cache / key
        work = cache / f"{key}.tmp"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        try:
            entry = compute_entry(name, work)
        except Exception as err:
            failed += 1
            tqdm.write(f"catalogue: {name} could not be built: {type(err).__name__}: {err}", file=sys.stderr)
            shutil.rmtree(work, ignore_errors=True)
            continue
        (work / "entry.json").write_text(json.dumps(entry, indent=1))
        shutil.rmtree(final, ignore_errors=True)
        work.rename(final)
    return 1 if failed else 0


# --------------------------------------------------------------------------------------------------
# Pages
# --------------------------------------------------------------------------------------------------
def _cell(value: str) -> str:
    return value.replace("|", "\\|")


def _table(headers: list[str], rows: list[list[str]], code: tuple[int, ...] = ()) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        cells = [f"`{c}`" if i in code else _cell(c) for i, c in enumerate(row)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _env_page(entry: dict) -> str:
    name, backend = entry["name"], entry["backend"]
    build = ", ".join(f"{k}={v!r}" for k, v in entry["build"].items())
    parts = [f"# {name}\n", f"```{{eval-rst}}\n.. meta::\n   :description: {name}: group map, specs and a picture\n```\n"]
    if entry["picture"] and backend in REST_POSE:
        parts.append(f"```{{image}} img/{stem(name)}.png\n:alt: {name} at rest\n:class: env-picture\n```\n")
        parts.append(f"*The MuJoCo model of `marl_envs.make({name!r})` at its rest pose.*\n")
    elif entry["picture"]:
        parts.append(f"```{{image}} img/{stem(name)}{Path(entry['picture']).suffix}\n"
                     f":alt: {name} after {SETTINGS['steps']} random steps\n:class: env-picture\n```\n")
        parts.append(f"*Env 0 of `marl_envs.make({name!r})` after {SETTINGS['steps']} random steps (seed "
                     f"{SETTINGS['seed']}){', then a random rollout' if entry['picture'].endswith('.gif') else ''}.*\n")
    else:
        parts.append(f":::{{note}}\nNo picture: this env cannot render here.\n\n`{_cell(entry['no_picture'])}`\n:::\n")
    parts.append(f"Built with `marl_envs.make({name!r}, {build})`:\n\n```text\n{entry['repr']}\n```\n")
    parts.append("## Groups\n\n" + _table(*entry["group_table"], code=(0,)) + "\n")
    parts.append("## Keys and specs\n\nWhat `marl-envs info` prints; shapes include the batch "
                 f"(`num_envs={entry['build']['num_envs']}`).\n\n" + _table(*entry["spec_table"], code=(0, 2)) + "\n")
    keywords = entry["keywords"]
    parts.append("## Keywords\n\nThe env's own keywords (pass them to `marl_envs.make`), "
                 f"{entry['keywords_from']}; the {BACKEND_TITLES[backend]} backend's options are on its "
                 f"[backend page](../../{BACKEND_PAGES[backend]}).\n")
    parts.append(_table(["keyword", "default"], [list(kv) for kv in keywords], code=(0, 1)) + "\n" if keywords
                 else "This env takes no keywords of its own.\n")
    return "\n".join(parts)


def _backend_page(backend: str, entries: list[dict]) -> str:
    title = BACKEND_TITLES[backend]
    rows = []
    for entry in entries:
        doc = stem(entry["name"])
        groups = ", ".join(f"{g} ({len(m)})" for g, m in entry["group_map"].items())
        thumb = (f"[![{entry['name']}](img/{doc}{Path(entry['picture']).suffix})]({doc}.md)" if entry["picture"] else "no picture")
        rows.append([thumb, f"[`{entry['name']}`]({doc}.md)", _cell(groups)])
    table = _table(["picture", "env", "groups (agents)"], rows)
    toctree = "\n".join(stem(e["name"]) for e in entries)
    return (f"# {title} envs\n\n{len(entries)} envs, generated from `marl_envs.available_envs({backend!r})`. "
            f"How the backend maps them: [{title} backend](../../{BACKEND_PAGES[backend]}).\n\n"
            f":::{{container}} env-table\n{table}\n:::\n\n```{{toctree}}\n:hidden:\n\n{toctree}\n```\n")


def _index_page(by_backend: dict[str, list[dict]], missing: list[str]) -> str:
    total = sum(len(v) for v in by_backend.values())
    lines = [f"# Env catalogue\n\nEvery env `marl_envs.make` accepts here: {total} names, one page each, generated "
             "from `marl_envs.available_envs()` when the docs are built (envs you `register` yourself are not "
             "listed). Each page has the env's group map, every key with its shape, dtype and spec (what "
             "`marl-envs info NAME` prints), its own keywords and a picture rendered from the env after a few "
             "random steps.\n"]
    lines.append(_table(["backend", "envs"], [[f"[{BACKEND_TITLES[b]}]({b}/index.md)", str(len(v))]
                                              for b, v in by_backend.items()]) + "\n")
    if missing:
        lines.append(":::{warning}\nNot installed when these docs were built, so not listed: "
                     + ", ".join(f"`{m}`" for m in missing) + ".\n:::\n")
    lines.append("```{toctree}\n:hidden:\n\n" + "\n".join(f"{b}/index" for b in by_backend) + "\n```\n")
    return "\n".join(lines)


def catalogue_names() -> list[str]:
    """Every name ``marl_envs.available_envs()`` lists, user-registered envs excluded."""
    import marl_envs

    user = set(marl_envs.available_envs("user"))
    return [name for name in marl_envs.available_envs() if name not in user]


def _write(path: Path, text: str) -> None:
    """Write ``text`` unless the file already holds it (so Sphinx re-reads only what changed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def generate(cache: Path = CACHE, out: Path = OUT) -> list[str]:
    """Compute the missing entries and write the catalogue's pages into ``out``; returns the names listed."""
    import marl_envs

    names = catalogue_names()
    keys = entry_keys(names)
    todo: dict[str, list[str]] = {}
    for name in names:
        if not (cache / keys[name] / "entry.json").exists():
            todo.setdefault(name.partition("/")[0], []).append(f"{keys[name]}={name}")
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    for backend, pairs in todo.items():
        # One process per backend: pyglet, MuJoCo and pygame each get an OpenGL / SDL state of their own.
        # Their libraries' own chatter on stdout (MuJoCo, pygame) is dropped; the progress bar is on stderr.
        subprocess.run([sys.executable, __file__, str(cache), *pairs], check=False, env=env,
                       stdout=subprocess.DEVNULL)
    entries = {}
    for name in names:
        path = cache / keys[name] / "entry.json"
        if not path.exists():
            raise RuntimeError(f"the catalogue entry of {name!r} could not be computed (see the messages above); "
                               f"run: python docs/_ext/env_catalogue.py /tmp/catalogue {keys[name]}={name}")
        entries[name] = json.loads(path.read_text())
    by_backend: dict[str, list[dict]] = {}
    for name, entry in entries.items():
        by_backend.setdefault(entry["backend"], []).append(entry)
    keep = {out / "index.md"}
    for backend, group in by_backend.items():
        keep.add(out / backend / "index.md")
        _write(out / backend / "index.md", _backend_page(backend, group))
        for entry in group:
            page = out / backend / f"{stem(entry['name'])}.md"
            keep.add(page)
            _write(page, _env_page(entry))
            if entry["picture"]:
                image = out / backend / "img" / (stem(entry["name"]) + Path(entry["picture"]).suffix)
                keep.add(image)
                source = cache / keys[entry["name"]] / entry["picture"]
                if not image.exists() or image.read_bytes() != source.read_bytes():
                    image.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source, image)
    missing = [b for b in marl_envs.available_backends() if not marl_envs.backend_installed(b)]
    _write(out / "index.md", _index_page(by_backend, missing))
    for path in out.rglob("*"):  # pages of envs no longer registered
        if path.is_file() and path not in keep:
            path.unlink()
    return names


def _on_builder_inited(app) -> None:
    generate()


def setup(app):
    app.connect("builder-inited", _on_builder_inited)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    sys.path.insert(0, str(SRC))
    raise SystemExit(main(sys.argv[1:]))
