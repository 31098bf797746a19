# Two commands do everything on a fresh machine:
#   make demo   sets up .venv and runs the demo (the main job): a tour, then MAPPO on vmas/navigation
#   make test   sets up .venv, .venv-torchrl and .venv-benchmarl, runs the test suite in them and checks the wheel
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
# BenchMARL 1.5.2 with the TorchRL it pins (< 0.12): torchrl 0.11.1, the oldest TorchRL supported, on its tensordict.
# A third virtualenv, where the BenchMARL tests, the interop tests and the core's run again (on tensordict 0.11).
TORCHRL_OLD_VENV := .venv-benchmarl
TORCHRL_OLD_BIN := $(TORCHRL_OLD_VENV)/bin
TORCHRL_OLD_SPEC ?= torchrl==0.11.1 tensordict==0.11.0 benchmarl==1.5.2
TORCHRL_OLD_STAMP := $(TORCHRL_OLD_VENV)/.installed
# The release check: a wheel and an sdist built by `python -m build` (the wheel from the sdist), the wheel installed
# with the vmas extra in a fresh virtualenv, and the README's quick start run there (scripts/check_wheel.py).
WHEEL_VENV := .venv-wheel
DOCS_STAMP := $(VENV)/.docs-installed
# Headless rendering (VMAS through pyglet, Brax through MuJoCo) draws with EGL from Mesa.
COMMA := ,
SYSTEM_PACKAGES := libegl1 libegl-mesa0 libgl1-mesa-dri libgl1

.PHONY: setup setup-torchrl system-packages demo test test-all wheel-check docs pictures snapshots figures baselines \
	ci-cold clean

setup: $(STAMP)

setup-torchrl: $(TORCHRL_STAMP) $(TORCHRL_OLD_STAMP)

system-packages:
	@if command -v dpkg >/dev/null 2>&1 && ! dpkg -s $(SYSTEM_PACKAGES) >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing $(SYSTEM_PACKAGES) (headless rendering)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SYSTEM_PACKAGES) >/dev/null; \
	  else echo "note: rendering needs: sudo apt-get install $(SYSTEM_PACKAGES)"; fi; \
	fi

# $(call venv,DIR,EXTRAS,PINS): a virtualenv with the CPU torch first (so that nothing pulls another), then this
# package with EXTRAS and PINS, then Melting Pot without TensorFlow (2 GB a virtualenv; only Melting Pot's bots
# import it), its files shared with .venv's, stamped when complete.
# $(call share,DIR): DIR's files that are byte for byte .venv's, and their .pyc, become hard links to them
# (scripts/share_venv_files.py: the virtualenvs beside .venv hold the same torch, JAX and backends, 2.7 GB of their 3)
share = $(if $(filter-out $(VENV),$(1)),$(PYTHON) scripts/share_venv_files.py $(1) $(VENV))
define venv
	$(MAKE) --no-print-directory system-packages
	$(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install --quiet --upgrade pip
	$(1)/bin/python -m pip install --quiet "$(TORCH_SPEC)"
	$(1)/bin/python -m pip install --quiet -e ".[$(2)]" "$(TORCH_SPEC)" $(3)
	$(1)/bin/python scripts/meltingpot_install.py "$(TORCH_SPEC)" $(3)
	$(call share,$(1))
	touch $(1)/.installed
endef

$(STAMP): pyproject.toml Makefile
	$(call venv,$(VENV),dev,)

$(TORCHRL_STAMP): pyproject.toml Makefile
	$(call venv,$(TORCHRL_VENV),dev$(COMMA)torchrl,$(TORCHRL_SPEC))

$(TORCHRL_OLD_STAMP): pyproject.toml Makefile
	$(call venv,$(TORCHRL_OLD_VENV),dev$(COMMA)benchmarl,$(TORCHRL_OLD_SPEC))

$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[docs]" "$(TORCH_SPEC)"
	touch $(DOCS_STAMP)

demo: $(STAMP)
	$(BIN)/marl-envs demo
	$(BIN)/python examples/mappo.py --env vmas/navigation --out runs/navigation

# The whole suite once, in .venv (the newest tensordict; the TorchRL and BenchMARL tests skip there), then only the
# tests marked `versions` (what depends on the TorchRL, BenchMARL and TensorDict versions, and a smoke test per
# backend: tests/conftest.py says which and why) in .venv-torchrl (torchrl + tensordict 0.14) and .venv-benchmarl
# (benchmarl 1.5.2 + torchrl + tensordict 0.11); MARL_ENVS_REQUIRE_TORCHRL and MARL_ENVS_REQUIRE_BENCHMARL make a
# missing torchrl or benchmarl an error. Then the wheel (wheel-check). Each phase prints its time.
REQUIRE_OLD := MARL_ENVS_REQUIRE_TORCHRL=1 MARL_ENVS_REQUIRE_BENCHMARL=1
PYTEST := -m pytest -n 2 --dist loadfile
# $(call timed,PHASE,COMMAND): run COMMAND, then print how long it took
timed = start=$$(date +%s); $(2); rc=$$?; echo "phase: $(1): $$(( $$(date +%s) - start )) s"; exit $$rc
test: $(STAMP) $(TORCHRL_STAMP) $(TORCHRL_OLD_STAMP)
	@$(call timed,suite .venv,$(BIN)/python $(PYTEST) $(ARGS))
	@$(call timed,suite .venv-torchrl,MARL_ENVS_REQUIRE_TORCHRL=1 $(TORCHRL_BIN)/python $(PYTEST) -m versions $(ARGS))
	@$(call timed,suite .venv-benchmarl,$(REQUIRE_OLD) $(TORCHRL_OLD_BIN)/python $(PYTEST) -m versions $(ARGS))
	@$(call timed,wheel-check,$(MAKE) --no-print-directory wheel-check)

# The same with the heavy sweeps (marked slow)
test-all:
	$(MAKE) --no-print-directory test ARGS=--all

wheel-check: $(STAMP)
	rm -rf dist $(WHEEL_VENV)
	$(BIN)/python -m build --outdir dist . >/dev/null
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(WHEEL_VENV)/bin/python -m pip install --quiet "$(TORCH_SPEC)"
	$(WHEEL_VENV)/bin/python -m pip install --quiet "$$(ls dist/*.whl)[vmas]" "$(TORCH_SPEC)"
	$(call share,$(WHEEL_VENV))
	$(WHEEL_VENV)/bin/python scripts/check_wheel.py README.md
	@ls dist

# The env catalogue (docs/envs) is generated from the registry at every build (its entries cached in
# ~/.cache/marl_envs/catalogue); its pictures are committed in docs/img/envs.
docs: $(DOCS_STAMP)
	@$(call timed,docs,$(BIN)/python -m sphinx -W --keep-going -q -b html docs docs/_build/html)
	@echo "docs: docs/_build/html/index.html"

# Render the catalogue's pictures that are missing or out of date (NAMES="vmas/balance ..." for some, FORCE=1 for
# all), into docs/img/envs to commit
pictures: $(DOCS_STAMP)
	$(BIN)/python docs/_ext/env_catalogue.py pictures $(if $(FORCE),--force) $(NAMES)

# The snapshots the package ships (each backend's env names, the keywords of the libraries that take **kwargs),
# read again from the installed backends: after adding a backend or changing a backend's version
snapshots: $(STAMP)
	$(BIN)/python scripts/snapshot_env_names.py
	$(BIN)/python scripts/snapshot_keywords.py

# The training figures (docs/img) redrawn from the runs kept in docs/runs, with the published results beside them
# (FIGURES="smax_2s3z ..." for some)
figures: $(STAMP)
	$(BIN)/python scripts/training_figures.py $(FIGURES)

# The baselines table of docs/baselines.md, written again from the runs kept in docs/runs and their references
baselines: $(STAMP)
	$(BIN)/python scripts/baselines.py

# .ci/run on a fresh clone of HEAD with the caches moved aside (cold), then again with them (warm); prints each
# phase's time
ci-cold:
	bash scripts/ci_cold.sh

clean:
	rm -rf $(VENV) $(TORCHRL_VENV) $(TORCHRL_OLD_VENV) $(WHEEL_VENV) dist .pytest_cache .hypothesis docs/_build docs/envs
