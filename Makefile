# Two commands do everything on a fresh machine:
#   make demo   sets up .venv and runs the demo (the main job): a tour, then MAPPO on vmas/navigation
#   make test   sets up .venv and runs the test suite
#   make docs   builds the documentation site into docs/_build/html (warnings are errors)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# A CPU build of torch; on a CUDA machine: make TORCH_SPEC="torch" ...
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.docs-installed
# Headless rendering (VMAS through pyglet, Brax through MuJoCo) draws with EGL from Mesa.
SYSTEM_PACKAGES := libegl1 libegl-mesa0 libgl1-mesa-dri libgl1

.PHONY: setup system-packages demo test test-all docs clean

setup: $(STAMP)

system-packages:
	@if command -v dpkg >/dev/null 2>&1 && ! dpkg -s $(SYSTEM_PACKAGES) >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing $(SYSTEM_PACKAGES) (headless rendering)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SYSTEM_PACKAGES) >/dev/null; \
	  else echo "note: rendering needs: sudo apt-get install $(SYSTEM_PACKAGES)"; fi; \
	fi

$(STAMP): pyproject.toml Makefile
	$(MAKE) --no-print-directory system-packages
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[dev]" "$(TORCH_SPEC)"
	touch $(STAMP)

$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[docs]" "$(TORCH_SPEC)"
	touch $(DOCS_STAMP)

demo: $(STAMP)
	$(BIN)/marl-envs demo
	$(BIN)/python examples/mappo.py --env vmas/navigation --out runs/navigation

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile

test-all: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile --all

# The env catalogue (docs/envs) is generated from the registry; its pictures are cached in docs/_build.
docs: $(DOCS_STAMP)
	$(BIN)/python -m sphinx -W --keep-going -q -b html docs docs/_build/html
	@echo "docs: docs/_build/html/index.html"

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis docs/_build docs/envs
