"""Sphinx configuration of the marl-envs documentation (``make docs`` builds it into ``docs/_build/html``)."""

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))

project = "marl-envs"
author = "the marl-envs developers"
copyright = "the marl-envs developers"  # noqa: A001 - Sphinx's own name

import marl_envs  # noqa: E402 - after the path set-up above

release = version = marl_envs.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "cli_reference",
    "env_catalogue",
    "results_table",
]

source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "_generated", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_default_options = {"members": True, "show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_use_ivar = True  # "Attributes:" as a field list (the properties are documented by autodoc)

html_theme = "furo"
html_title = f"marl-envs {release}"
# the second: the catalogue's card pictures, written when the build starts (env_catalogue); it must exist already
(DOCS / "_generated" / "static").mkdir(parents=True, exist_ok=True)
html_static_path = ["_static", "_generated/static"]
html_css_files = ["catalogue.css"]
