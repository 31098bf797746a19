# Two commands do everything on a fresh machine:
#   make demo   sets up .venv and runs the demo (the main job): a tour, then MAPPO on vmas/navigation
#   make test   sets up .venv and runs the test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# A CPU build of torch; on a CUDA machine: make TORCH_SPEC="torch" ...
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-all bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[dev]" "$(TORCH_SPEC)"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/marl-envs demo
	$(BIN)/python examples/mappo.py --env vmas/navigation --out runs/navigation

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile

test-all: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile --all

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
