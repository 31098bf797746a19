"""The env catalogue: one page per registered env, generated from the registry at every docs build.

Each page has the env's group map, the key / shape / dtype / spec table ``marl-envs info`` prints, the env's own
keywords with their defaults (its *entry*, computed by building the env) and a picture of it.

- **Entries** are computed at every build by this file run as a script, one process per backend (their
  renderers and libraries never share a process), and cached in ``${XDG_CACHE_HOME:-~/.cache}/marl_envs/catalogue``
  under a key of everything that determines them: the env name, the build settings, the versions of the backend's
  libraries and the source of marl_envs, groupings and this file. Building an env compiles nothing, so a build
  from a cold cache takes a few minutes and a warm one reads the cache.
- **Pictures** are committed in ``docs/img/envs/<backend>/`` with a manifest (``pictures.json``) that records,
  for each env, the key it was rendered under (the env name, the picture settings and the backend's library
  versions) or why it has none. Rendering an env steps it, which compiles a JAX env (seconds to a minute each),
  so a build never renders: ``make pictures`` renders the pictures that are missing or whose key changed, and
  ``python docs/_ext/env_catalogue.py pictures --check`` lists them without rendering. A test checks that every
  registered env has its record.
"""

from __future__ import annotations

import hashlib
import html
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent.parent
ROOT = DOCS.parent
SRC = ROOT / "src"
OUT = DOCS / "envs"  # generated, git-ignored
PICTURES = DOCS / "img" / "envs"  # committed: <backend>/<stem>.png|gif and the manifest
MANIFEST = PICTURES / "pictures.json"


def default_cache() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/marl_envs/catalogue``: the entries, kept across clones and builds."""
    from marl_envs._core.names import user_cache

    return user_cache("catalogue")


#: How every env is built for its entry and its picture: a small batch, a fixed seed.
SETTINGS = {"num_envs": 2, "seed": 0}
#: How an env is pictured: env 0 after a few random steps, a PNG on a palette (small enough to commit), or a short
#: GIF for the showcase envs.
PICTURE = {"steps": 8, "max_side": 320, "colors": 128, "gif_frames": 30, "gif_side": 220}
#: Envs pictured with a short GIF rather than a PNG.
SHOWCASE = {
    "vmas/balance", "vmas/navigation", "vmas/football", "brax/ant_4x2", "pettingzoo/butterfly/pistonball_v6",
    "pettingzoo/mpe/simple_spread_v3",
}
def _record(backend: str) -> Any:
    """``backend``'s record (its title, docs page, distributions, the packages it builds on); None for a name no
    backend registered."""
    import marl_envs

    return marl_envs.registry.backends().get(backend)


def backend_title(backend: str) -> str:
    record = _record(backend)
    return backend if record is None else record.title


def docs_page(backend: str) -> str:
    """The docs page of ``backend`` (relative to ``docs/``): its own, or the page it shares with other families."""
    return _record(backend).docs


def pettingzoo_machinery(backend: str) -> bool:
    """``backend`` is built on the PettingZoo machinery: its instances draw frames only if built with
    ``render_mode``."""
    record = _record(backend)
    return backend == "pettingzoo" or (record is not None and "pettingzoo" in record.builds_on)


# --------------------------------------------------------------------------------------------------
# Keys
# --------------------------------------------------------------------------------------------------
def stem(name: str) -> str:
    """``pettingzoo/mpe/simple_v3`` -> ``mpe-simple_v3``, ``brax/humanoid_9-8`` -> ``humanoid_9-8``: the file
    name of an env's page (in its backend's folder) and picture."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name.partition("/")[2].replace("/", "-"))


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` (None if it is not installed)."""
    from marl_envs._version import installed_version as version

    return version(distribution)


def _versions(backend: str) -> dict[str, str]:
    """The installed versions of the distributions that determine ``backend``'s entries (its record's, and
    torch)."""
    record = _record(backend)
    distributions = () if record is None else (*record.distributions, "torch")
    return {d: installed_version(d) or "absent" for d in distributions}


def _source_digest(backend: str) -> str:
    """Digest of the code an entry of ``backend`` runs: marl_envs' core, its backend files, groupings and the
    functions of this file that compute entries (not those that write pages)."""
    package = SRC / "marl_envs"
    files = sorted(package.glob("*.py")) + sorted((SRC / "groupings").rglob("*.py"))
    backends = package / "backends"
    files += sorted(backends.glob(f"{backend}.py"))
    record = _record(backend)
    for folder in (backend, *(() if record is None else record.builds_on)):
        files += sorted((backends / folder).glob("*.py"))
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    for function in (compute_entry, _build, _env_keywords):  # this file's part (not the pages)
        digest.update(inspect.getsource(function).encode())
    return digest.hexdigest()


def _keys(names: list[str], per_backend) -> dict[str, str]:
    cached: dict[str, dict] = {}
    keys = {}
    for name in names:
        backend = name.partition("/")[0]
        if backend not in cached:
            cached[backend] = per_backend(backend)
        blob = json.dumps({"name": name, **cached[backend]}, sort_keys=True)
        keys[name] = hashlib.sha256(blob.encode()).hexdigest()[:20]
    return keys


def entry_keys(names: list[str]) -> dict[str, str]:
    """Cache key of each name's entry: its name, the build settings, the backend's library versions and our code."""
    return _keys(names, lambda backend: {"settings": SETTINGS, "versions": _versions(backend),
                                         "source": _source_digest(backend)})


def picture_keys(names: list[str]) -> dict[str, str]:
    """Key of each name's picture: its name, the build and picture settings, whether it is a GIF and the backend's
    library versions (what the env looks like; our code changes it rarely, and ``make pictures FORCE=1`` redraws
    all)."""
    keys = _keys(names, lambda backend: {"settings": SETTINGS, "picture": PICTURE, "versions": _versions(backend)})
    return {name: key + ("g" if name in SHOWCASE else "") for name, key in keys.items()}


# --------------------------------------------------------------------------------------------------
# Computing entries and pictures (run in a subprocess per backend)
# --------------------------------------------------------------------------------------------------
def _env_keywords(env, backend: str) -> tuple[list[tuple[str, str]], str]:
    """The env's own keywords with their defaults, and where they were read from."""
    if backend == "vmas":
        declared = env.library_keywords  # the keywords marl-envs checks, declared per VMAS version
        if declared is None:
            return [], "not declared for the installed VMAS version (none are checked)"
        return ([(name, "?" if default is None else default) for name, default in declared.items()],
                "the keywords the scenario reads, as marl-envs declares them for this VMAS version")
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
    elif pettingzoo_machinery(backend) and hasattr(env, "task_spec"):  # the task's own keywords (Melting Pot: none)
        keywords = env.task_spec.own_keywords() or {}
        return ([(name, "required" if default is inspect.Parameter.empty else repr(default))
                 for name, default in keywords.items()], f"the keywords of {backend} task {env.task!r}")
    else:  # a backend added by its record alone: its env class's own signature
        target = type(env).__init__
        where = f"the signature of {type(env).__name__}.__init__"
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


def _save_png(frame, path: Path) -> None:
    """A thumbnail of ``frame`` on an adaptive palette: a few KB to commit rather than a hundred."""
    image = _fit(frame, PICTURE["max_side"])
    image.quantize(colors=PICTURE["colors"], method=2).save(path, optimize=True)  # 2: fast octree


def render_picture(name: str, folder: Path) -> str:
    """Render env 0 of ``name`` after a few random steps into ``folder``; returns the file name written. Raises
    whatever stops the env from rendering (the manifest records it)."""
    backend = name.partition("/")[0]
    if backend in REST_POSE:
        env = _build(name)
        try:
            _save_png(_rest_pose(env.playground_env.mj_model), folder / "picture.png")
        finally:
            env.close()
        return "picture.png"
    env = _build(name, render=True)
    try:
        if not env.renders:
            _frame(env)  # raises the env's own reason, before a step compiles
        td = env.reset()
        for _ in range(PICTURE["steps"]):
            _, td = env.step_and_maybe_reset(env.rand_action(td))
        if name not in SHOWCASE:
            _save_png(_frame(env), folder / "picture.png")
            return "picture.png"
        frames = []
        for _ in range(PICTURE["gif_frames"]):
            frames.append(_fit(_frame(env), PICTURE["gif_side"]))
            _, td = env.step_and_maybe_reset(env.rand_action(td))
        frames[0].save(folder / "picture.gif", save_all=True, append_images=frames[1:], duration=80, loop=0,
                       optimize=True)
        return "picture.gif"
    finally:
        env.close()


def _build(name: str, render: bool = False):
    """``name`` built with SETTINGS; with ``render``, PettingZoo-machinery envs are asked for frames at construction
    (where they take ``render_mode``)."""
    import marl_envs

    if render and pettingzoo_machinery(name.partition("/")[0]):
        try:
            return marl_envs.make(name, render_mode="rgb_array", **SETTINGS)
        except (ValueError, TypeError):
            pass
    return marl_envs.make(name, **SETTINGS)


def compute_entry(name: str) -> dict:
    """Build ``name`` and describe it: its repr, group map, spec table and keywords. Compiles nothing."""
    from marl_envs.cli.format import GROUP_HEADERS, SPEC_HEADERS, group_rows, spec_rows

    backend = name.partition("/")[0]
    start = time.perf_counter()
    env = _build(name)
    try:
        entry = {
            "name": name,
            "backend": backend,
            "build": dict(SETTINGS),
            "repr": repr(env),
            "group_map": env.group_map,
            "group_table": [GROUP_HEADERS, [list(map(str, row)) for row in group_rows(env)]],
            "spec_table": [SPEC_HEADERS, [list(map(str, row)) for row in spec_rows(env)]],
        }
        entry["keywords"], entry["keywords_from"] = _env_keywords(env, backend)
    finally:
        env.close()
    entry["seconds"] = round(time.perf_counter() - start, 2)
    return entry


def _quiet_process() -> None:
    import warnings

    warnings.simplefilter("ignore")  # third-party chatter (deprecations, pygame's banner) is not the docs'
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    sys.path.insert(0, str(SRC))


def _work(kind: str, folder: Path, pairs: list[tuple[str, str]]) -> int:
    """Compute ``kind`` ("entries" or "pictures") of each (key, name) into ``folder/key``, with a progress bar;
    returns how many failed. A picture that cannot be rendered is no failure: its ``why`` is recorded."""
    from tqdm import tqdm

    failed = 0
    backend = pairs[0][1].partition("/")[0] if pairs else ""
    bar = tqdm(pairs, desc=f"{kind}: {backend}", unit="env", file=sys.stderr, dynamic_ncols=True,
               disable=None)  # None: a bar on a terminal; a log (CI) gets one line per backend below
    start = time.perf_counter()
    for key, name in bar:
        bar.set_postfix_str(name)
        final, work = folder / key, folder / f"{key}.tmp"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        try:
            if kind == "entries":
                record = compute_entry(name)
            else:
                try:
                    record = {"file": render_picture(name, work)}
                except Exception as err:  # the page says why: an env that cannot render is documented as such
                    record = {"why": f"{type(err).__name__}: {err}"}
        except Exception as err:
            failed += 1
            tqdm.write(f"{kind}: {name} could not be built: {type(err).__name__}: {err}", file=sys.stderr)
            shutil.rmtree(work, ignore_errors=True)
            continue
        (work / "record.json").write_text(json.dumps(record, indent=1))
        shutil.rmtree(final, ignore_errors=True)
        work.rename(final)
    if bar.disable:
        print(f"{kind}: {backend}: {len(pairs)} envs in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return failed


def _run_backends(kind: str, folder: Path, todo: dict[str, list[str]], keys: dict[str, str], jobs: int = 2) -> None:
    """Run ``_work`` in one process per backend (pyglet, MuJoCo and pygame each get an OpenGL / SDL state of their
    own), ``jobs`` at a time. Their libraries' own chatter on stdout is dropped; the progress bars are on stderr."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    waiting = [[sys.executable, __file__, f"_{kind}", str(folder), *(f"{keys[n]}={n}" for n in names)]
               for names in sorted(todo.values(), key=len, reverse=True)]
    running: list[subprocess.Popen] = []
    while waiting or running:
        while waiting and len(running) < jobs:
            running.append(subprocess.Popen(waiting.pop(0), env=env, stdout=subprocess.DEVNULL))
        time.sleep(0.2)
        running = [p for p in running if p.poll() is None]


def _by_backend(names: list[str]) -> dict[str, list[str]]:
    todo: dict[str, list[str]] = {}
    for name in names:
        todo.setdefault(name.partition("/")[0], []).append(name)
    return todo


def main(argv: list[str]) -> int:
    """``pictures [--check] [--force] [NAME ...]``: bring the committed pictures up to date (``update_pictures``).
    ``_entries|_pictures FOLDER KEY=NAME ...`` (one backend's names, run by ``_run_backends``): compute each into
    FOLDER/KEY."""
    _quiet_process()
    if argv[:1] in (["_entries"], ["_pictures"]):
        pairs = [tuple(arg.partition("=")[::2]) for arg in argv[2:]]
        return 1 if _work(argv[0][1:], Path(argv[1]), pairs) else 0
    if argv[:1] == ["pictures"]:
        flags = {a for a in argv[1:] if a.startswith("--")}
        if flags - {"--check", "--force"}:
            print(f"unknown option {sorted(flags - {'--check', '--force'})[0]!r}: expected --check or --force",
                  file=sys.stderr)
            return 2
        stale = update_pictures([a for a in argv[1:] if not a.startswith("--")] or None, check="--check" in flags,
                                force="--force" in flags)
        return 1 if stale and "--check" in flags else 0
    print("usage: python docs/_ext/env_catalogue.py pictures [--check] [--force] [NAME ...]", file=sys.stderr)
    return 2


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


def _picture_path(picture: dict | None) -> str | None:
    """The committed picture's path from a page in ``docs/envs/<backend>/``, or None."""
    return f"../../img/envs/{picture['file']}" if picture and picture.get("file") else None


def _env_page(entry: dict, picture: dict | None) -> str:
    name, backend = entry["name"], entry["backend"]
    build = ", ".join(f"{k}={v!r}" for k, v in entry["build"].items())
    parts = [f"# {name}\n", f"```{{eval-rst}}\n.. meta::\n   :description: {name}: group map, specs and a picture\n```\n"]
    path = _picture_path(picture)
    if path and backend in REST_POSE:
        parts.append(f"```{{image}} {path}\n:alt: {name} at rest\n:class: env-picture\n```\n")
        parts.append(f"*The MuJoCo model of `marl_envs.make({name!r})` at its rest pose.*\n")
    elif path:
        parts.append(f"```{{image}} {path}\n:alt: {name} after {PICTURE['steps']} random steps\n"
                     f":class: env-picture\n```\n")
        parts.append(f"*Env 0 of `marl_envs.make({name!r})` after {PICTURE['steps']} random steps (seed "
                     f"{SETTINGS['seed']}){', then a random rollout' if path.endswith('.gif') else ''}.*\n")
    elif picture:
        parts.append(f":::{{note}}\nNo picture: {no_picture(backend, picture['why'])}\n:::\n")
    else:
        parts.append(":::{note}\nNo picture yet: `make pictures` renders it.\n:::\n")
    parts.append(f"Built with `marl_envs.make({name!r}, {build})`:\n\n:::{{container}} env-repr\n```text\n"
                 f"{entry['repr']}\n```\n:::\n")
    parts.append("## Groups\n\n" + _table(*entry["group_table"], code=(0,)) + "\n")
    parts.append("## Keys and specs\n\nWhat `marl-envs info` prints; shapes include the batch "
                 f"(`num_envs={entry['build']['num_envs']}`).\n\n" + _table(*entry["spec_table"], code=(0, 2)) + "\n")
    keywords = entry["keywords"]
    parts.append("## Keywords\n\nThe env's own keywords (pass them to `marl_envs.make`), "
                 f"{entry['keywords_from']}; the {backend_title(backend)} backend's options are on its "
                 f"[backend page](../../{docs_page(backend)}).\n")
    parts.append(_table(["keyword", "default"], [list(kv) for kv in keywords], code=(0, 1)) + "\n" if keywords
                 else "This env takes no keywords of its own.\n")
    return "\n".join(parts)


def _backend_page(backend: str, entries: list[dict], pictures: dict[str, dict]) -> str:
    title = backend_title(backend)
    rows = []
    for entry in entries:
        doc = stem(entry["name"])
        groups = ", ".join(f"{g} ({len(m)})" for g, m in entry["group_map"].items())
        path = _picture_path(pictures.get(entry["name"]))
        thumb = f"[![{entry['name']}]({path})]({doc}.md)" if path else "no picture"
        rows.append([thumb, f"[`{entry['name']}`]({doc}.md)", _cell(groups)])
    table = _table(["picture", "env", "groups (agents)"], rows)
    toctree = "\n".join(stem(e["name"]) for e in entries)
    return (f"# {title} envs\n\n{len(entries)} envs, generated from `marl_envs.available_envs({backend!r})`. "
            f"How the backend maps them: [{title} backend](../../{docs_page(backend)}).\n\n"
            f":::{{container}} env-table\n{table}\n:::\n\n```{{toctree}}\n:hidden:\n\n{toctree}\n```\n")


#: The tags the gallery filters by, in the order of its buttons.
TAGS = {"continuous": "continuous actions", "discrete": "discrete actions", "masks": "action masks",
        "groups": "several groups", "differentiable": "differentiable", "gpu": "runs on a GPU"}
#: Backends whose envs step through torch's autograd (``requires_grad=True``).
DIFFERENTIABLE = ("brax",)
#: The picture on a family's card: one of its envs (the first with a picture otherwise).
COVER_ENVS = {"vmas": "vmas/balance", "brax": "brax/ant_4x2", "pettingzoo": "pettingzoo/butterfly/pistonball_v6",
          "playground": "playground/CheetahRun_6x1", "mamujoco": "mamujoco/Ant_4x2", "magent2": "magent2/battle_v4",
          "jumanji": "jumanji/RobotWarehouse-v0"}
COVERS = DOCS / "_generated" / "static" / "covers"  # the cards' pictures: the built site's _static/covers


def env_tags(entry: dict) -> set[str]:
    """The gallery's tags of one env, read from its entry (its action specs, keys and groups) and its backend."""
    import marl_envs

    rows = entry["spec_table"][1]
    actions = [row[4] for row in rows if row[1] == "action"]
    tags = set()
    if any(spec.startswith(("Bounded", "Unbounded")) for spec in actions):
        tags.add("continuous")
    if any(spec.startswith(("Categorical", "OneHot", "MultiCategorical", "MultiOneHot", "Binary")) for spec in actions):
        tags.add("discrete")
    if any(row[0].endswith("action_mask") for row in rows):
        tags.add("masks")
    if len(entry["group_map"]) > 1:
        tags.add("groups")
    if entry["backend"] in DIFFERENTIABLE:
        tags.add("differentiable")
    if marl_envs.registry.backend_record(entry["backend"]).host_wait:  # the backends that run on a device
        tags.add("gpu")
    return tags


def _cover(backend: str, entries: list[dict], pictures: dict[str, dict], covers: Path) -> tuple[str | None, str]:
    """The card's picture, copied into ``covers`` (its path in the built site, or None) and its caption."""
    names = [COVER_ENVS.get(backend)] + [e["name"] for e in entries]
    for name in names:
        picture = pictures.get(name) if name else None
        if picture and picture.get("file") and (PICTURES / picture["file"]).exists():
            source = PICTURES / picture["file"]
            target = covers / f"{backend}{source.suffix}"
            shutil.copyfile(source, target)
            return f"../_static/covers/{target.name}", name
    reasons = {no_picture(backend, pictures[e["name"]]["why"]) for e in entries if "why" in pictures.get(e["name"], {})}
    return None, "No pictures: " + " ".join(sorted(reasons))


def no_picture(backend: str, why: str) -> str:
    """Why an env has no picture, in a reader's words, from the error its ``render()`` raised (``why`` in the
    manifest: the exception's type and text, kept for whoever renders the pictures)."""
    kind, _, text = why.partition(": ")
    if kind in ("NotImplementedError", "ValueError") and re.search(r"draw|render", text):
        return f"{backend_title(backend)} draws no picture of this env."
    return f"{backend_title(backend)} could not draw this env on the machine that built these pages."


def _card(backend: str, entries: list[dict], pictures: dict[str, dict], covers: Path) -> str:
    counts = {tag: sum(tag in env_tags(e) for e in entries) for tag in TAGS}
    src, caption = _cover(backend, entries, pictures, covers)
    picture = (f'<img src="{src}" alt="{html.escape(caption)}" loading="lazy">' if src
               else f'<div class="no-picture">{html.escape(caption)}</div>')
    chips = "".join(f'<span class="tag">{TAGS[t]} {n}</span>' for t, n in counts.items() if n)
    data = " ".join(f'data-{t}="{n}"' for t, n in counts.items())
    return (f'<a class="env-card" href="{backend}/index.html" data-all="{len(entries)}" {data}>{picture}'
            f'<span class="title">{html.escape(backend_title(backend))}</span>'
            f'<span class="count"><b>{len(entries)}</b> envs</span><span class="tags">{chips}</span></a>')


GALLERY_SCRIPT = """<script>
document.querySelectorAll(".env-filter button").forEach(function (button) {
  button.addEventListener("click", function () {
    var tag = button.dataset.tag;
    document.querySelectorAll(".env-filter button").forEach(function (b) { b.classList.toggle("on", b === button); });
    document.querySelectorAll(".env-card").forEach(function (card) {
      var n = Number(card.dataset[tag]);
      card.hidden = n === 0;
      card.querySelector(".count b").textContent = n;
    });
  });
});
</script>"""


def _index_page(by_backend: dict[str, list[dict]], missing: list[str], pictures: dict[str, dict], covers: Path
                ) -> str:
    total = sum(len(v) for v in by_backend.values())
    lines = [f"# Env catalogue\n\nEvery env `marl_envs.make` accepts here: {total} names in {len(by_backend)} "
             "families, one page each, generated from `marl_envs.available_envs()` when the docs are built (envs you "
             "`register` yourself are not listed). Pick a tag to see the families that have such envs, and how many. "
             "Each env's page has its group map, every key with its shape, dtype and spec (what `marl-envs info NAME` "
             "prints), its keywords and a picture rendered from the env after a few random steps.\n"]
    buttons = "".join(f'<button data-tag="{tag}">{label}</button>' for tag, label in {"all": "all", **TAGS}.items())
    cards = "\n".join(_card(b, v, pictures, covers) for b, v in by_backend.items())
    lines.append(f'```{{raw}} html\n<div class="env-filter">{buttons}</div>\n<div class="env-gallery">\n{cards}\n'
                 f"</div>\n{GALLERY_SCRIPT}\n```\n")
    lines.append("The same, as a table:\n")
    lines.append(_table(["family", "envs", *TAGS.values()],
                        [[f"[{backend_title(b)}]({b}/index.md)", str(len(v)),
                          *(str(sum(t in env_tags(e) for e in v)) for t in TAGS)] for b, v in by_backend.items()])
                 + "\n")
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


def read_manifest(path: Path = MANIFEST) -> dict[str, dict]:
    """The committed pictures' records: name -> ``{"key", "file"}`` or ``{"key", "why"}`` (it cannot render)."""
    return json.loads(path.read_text()) if path.exists() else {}


def generate(cache: Path | None = None, out: Path = OUT, manifest: Path = MANIFEST, covers: Path | None = None
             ) -> list[str]:
    """Compute the entries missing from ``cache`` and write the catalogue's pages into ``out``, each with its
    committed picture, and the gallery cards' pictures into ``covers`` (default: the site's ``COVERS`` when ``out``
    is the docs' own folder, else beside ``out``); returns the names listed."""
    import marl_envs

    cache = cache or default_cache()
    covers = covers or (COVERS if out == OUT else out.parent / "covers")
    names = catalogue_names()
    keys = entry_keys(names)
    todo = _by_backend([name for name in names if not (cache / keys[name] / "record.json").exists()])
    _run_backends("entries", cache, todo, keys)
    entries = {}
    for name in names:
        path = cache / keys[name] / "record.json"
        if not path.exists():
            raise RuntimeError(f"the catalogue entry of {name!r} could not be computed (see the messages above); "
                               f"run: python docs/_ext/env_catalogue.py _entries /tmp/catalogue {keys[name]}={name}")
        entries[name] = json.loads(path.read_text())
    pictures = read_manifest(manifest)
    shutil.rmtree(covers, ignore_errors=True)
    covers.mkdir(parents=True)  # a static path of the site: it exists even with no picture to show
    by_backend: dict[str, list[dict]] = {}
    for name, entry in entries.items():
        by_backend.setdefault(entry["backend"], []).append(entry)
    keep = {out / "index.md"}
    for backend, group in by_backend.items():
        keep.add(out / backend / "index.md")
        _write(out / backend / "index.md", _backend_page(backend, group, pictures))
        for entry in group:
            page = out / backend / f"{stem(entry['name'])}.md"
            keep.add(page)
            _write(page, _env_page(entry, pictures.get(entry["name"])))
    missing = [b for b in marl_envs.available_backends() if not marl_envs.backend_installed(b)]
    _write(out / "index.md", _index_page(by_backend, missing, pictures, covers))
    for path in out.rglob("*"):  # pages of envs no longer registered
        if path.is_file() and path not in keep:
            path.unlink()
    return names


def update_pictures(names: list[str] | None = None, check: bool = False, force: bool = False,
                    folder: Path = PICTURES) -> list[str]:
    """Render the pictures of ``names`` (default: every registered env) that are missing or whose key changed (all
    of them with ``force``) into ``folder``, update its manifest and remove the pictures of envs no longer registered
    (a backend not installed here keeps its records).
    With ``check``, render nothing and only list them. Returns the names that were (or, with ``check``, would be)
    rendered."""
    import marl_envs

    registered = catalogue_names()
    unknown = sorted(set(names or ()) - set(registered))
    if unknown:
        raise ValueError(f"not registered: {unknown}; pass names from marl_envs.available_envs()")
    manifest_path = folder / "pictures.json"
    manifest = read_manifest(manifest_path)
    keys = picture_keys(registered)
    stale = [name for name in names or registered
             if force or manifest.get(name, {}).get("key") != keys[name]
             or ("file" in manifest[name] and not (folder / manifest[name]["file"]).exists())]
    if check:
        for name in stale:
            print(f"stale: {name}" if name in manifest else f"missing: {name}")
        return stale
    work = folder / ".render"
    shutil.rmtree(work, ignore_errors=True)
    _run_backends("pictures", work, _by_backend(stale), keys)
    for name in stale:
        record_path = work / keys[name] / "record.json"
        if not record_path.exists():
            print(f"pictures: {name} could not be built (see the messages above)", file=sys.stderr)
            continue
        record = {"key": keys[name], **json.loads(record_path.read_text())}
        if "file" in record:
            target = f"{name.partition('/')[0]}/{stem(name)}{Path(record['file']).suffix}"
            (folder / target).parent.mkdir(parents=True, exist_ok=True)
            shutil.move(work / keys[name] / record["file"], folder / target)
            record["file"] = target
        manifest[name] = record
    shutil.rmtree(work, ignore_errors=True)
    installed = {b for b in marl_envs.available_backends() if marl_envs.backend_installed(b)}
    for name in set(manifest) - set(registered):  # envs their installed backend no longer lists, or of no backend
        backend = name.partition("/")[0]
        if backend in installed or backend not in marl_envs.available_backends():
            del manifest[name]
    kept = {record["file"] for record in manifest.values() if "file" in record}
    for path in folder.glob("*/*.*"):  # pictures no record names (an env renamed, or that no longer renders)
        if path.relative_to(folder).as_posix() not in kept:
            path.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    manifest_path.write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")
    return stale


def backends_table() -> str:
    """The landing page's table of backends, one row per ``marl_envs.registry.backends()`` record: its docs page, its
    pip extra and how many envs it lists (from the names snapshot: no backend is imported)."""
    import marl_envs

    rows = []
    for name, record in marl_envs.registry.backends().items():
        title, page = record.title, record.docs
        if marl_envs.backend_installed(name):
            envs = f"[{len(marl_envs.available_envs(name))}](envs/{name}/index.md)"
        else:
            envs = "not installed here"
        rows.append([f"[{title}]({page})" if page else title, f"`{name}/...`",
                     f"`pip install -e '.[{record.extra}]'`", envs])
    return (f"{len(rows)} backends, from `marl_envs.registry.backends()` when these docs were built; the counts are "
            "the names `marl_envs.available_envs(backend)` lists (the [catalogue](envs/index.md) shows each env).\n\n"
            + _table(["backend", "names", "install", "envs"], rows) + "\n")


def families_table() -> str:
    """The architecture page's table of the families' packages, one row per ``marl_envs.registry.backends()``
    record: its package, its modules (read from the source tree) and the packages it builds on."""
    import marl_envs

    root = Path(marl_envs.__file__).parents[1]
    rows = []
    for record in marl_envs.registry.backends().values():
        package = root.joinpath(*record.module.split("."))
        modules = "  ".join(path.name for path in sorted(package.glob("*.py")) if path.name != "__init__.py")
        built_on = ", ".join(f"backends/{b}" for b in record.builds_on) or "-"
        rows.append([record.title, f"{record.module.replace('.', '/')}/", modules, built_on])
    return (f"{len(rows)} families, from `marl_envs.registry.backends()` and the source tree when these docs were "
            "built.\n\n" + _table(["family", "package", "modules", "builds on"], rows, code=(1, 2, 3)) + "\n")


def _on_builder_inited(app) -> None:
    _write(DOCS / "_generated" / "backends.md", backends_table())
    _write(DOCS / "_generated" / "families.md", families_table())
    generate()


def setup(app):
    app.connect("builder-inited", _on_builder_inited)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
