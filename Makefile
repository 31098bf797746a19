# Two commands do everything on a fresh machine:
#   make demo   sets up .venv and runs the demo (the main job): a tour, then MAPPO on vmas/navigation
#   make test   sets up .venv and .venv-torchrl and runs the test suite in both
#   make docs   builds the documentation site into docs/_build/html (warnings are errors)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# A CPU build of torch; on a CUDA machine: make TORCH_SPEC="torch" ...
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed
# The TorchRL interop (marl_envs.torchrl) is tested in a second virtualenv: torchrl 0.14 pins tensordict < 0.15,
# while .venv gets the newest tensordict the core supports. Pinned, so pip never swaps the CPU torch for another.
TORCHRL_VENV := .venv-torchrl
TORCHRL_BIN := $(TORCHRL_VENV)/bin
TORCHRL_SPEC ?= torchrl==0.14.1 tensordict==0.14.3
TORCHRL_STAMP := $(TORCHRL_VENV)/.installed
DOCS_STAMP := $(VENV)/.docs-installed
# Headless rendering (VMAS through pyglet, Brax through MuJoCo) draws with EGL from Mesa.
SYSTEM_PACKAGES := libegl1 libegl-mesa0 libgl1-mesa-dri libgl1

.PHONY: setup setup-torchrl system-packages demo test test-all docs clean

setup: $(STAMP)

setup-torchrl: $(TORCHRL_STAMP)

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

$(TORCHRL_STAMP): pyproject.toml Makefile
	$(MAKE) --no-print-directory system-packages
	$(PYTHON) -m venv $(TORCHRL_VENV)
	$(TORCHRL_BIN)/python -m pip install --quiet --upgrade pip
	$(TORCHRL_BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(TORCHRL_BIN)/python -m pip install --quiet -e ".[dev,torchrl]" "$(TORCH_SPEC)" $(TORCHRL_SPEC)
	touch $(TORCHRL_STAMP)

$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[docs]" "$(TORCH_SPEC)"
	touch $(DOCS_STAMP)

demo: $(STAMP)
	$(BIN)/marl-envs demo
	$(BIN)/python examples/mappo.py --env vmas/navigation --out runs/navigation

# Twice: the core on the newest tensordict (.venv; the TorchRL tests skip there), then everything again with
# torchrl + tensordict 0.14 (.venv-torchrl), where MARL_ENVS_REQUIRE_TORCHRL makes a missing torchrl an error.
test: $(STAMP) $(TORCHRL_STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile
	MARL_ENVS_REQUIRE_TORCHRL=1 $(TORCHRL_BIN)/python -m pytest -n 2 --dist loadfile

test-all: $(STAMP) $(TORCHRL_STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile --all
	MARL_ENVS_REQUIRE_TORCHRL=1 $(TORCHRL_BIN)/python -m pytest -n 2 --dist loadfile --all

# The env catalogue (docs/envs) is generated from the registry; its pictures are cached in docs/_build.
docs: $(DOCS_STAMP)
	$(BIN)/python -m sphinx -W --keep-going -q -b html docs docs/_build/html
	@echo "docs: docs/_build/html/index.html"

clean:
	rm -rf $(VENV) $(TORCHRL_VENV) .pytest_cache .hypothesis docs/_build docs/envs
