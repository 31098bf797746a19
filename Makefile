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

.PHONY: setup setup-torchrl system-packages demo test test-all wheel-check docs clean

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
# package with EXTRAS and PINS, stamped when complete.
define venv
	$(MAKE) --no-print-directory system-packages
	$(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install --quiet --upgrade pip
	$(1)/bin/python -m pip install --quiet "$(TORCH_SPEC)"
	$(1)/bin/python -m pip install --quiet -e ".[$(2)]" "$(TORCH_SPEC)" $(3)
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

# Three times: the core on the newest tensordict (.venv; the TorchRL and BenchMARL tests skip there), everything
# but BenchMARL again with torchrl + tensordict 0.14 (.venv-torchrl), then BenchMARL, the interop, the core and the
# torch backends with benchmarl 1.5.2 + torchrl + tensordict 0.11 (.venv-benchmarl); MARL_ENVS_REQUIRE_TORCHRL and
# MARL_ENVS_REQUIRE_BENCHMARL make a missing torchrl or benchmarl an error. Then the wheel (wheel-check).
REQUIRE_OLD := MARL_ENVS_REQUIRE_TORCHRL=1 MARL_ENVS_REQUIRE_BENCHMARL=1
OLD_TORCHRL_TESTS := tests/test_benchmarl.py tests/test_torchrl.py tests/test_env.py tests/test_specs.py tests/test_checks.py \
	tests/test_fuzz.py tests/test_registry.py tests/test_keywords.py tests/backends/test_vmas.py \
	tests/backends/test_pettingzoo.py 'tests/test_docs.py::test_doc_blocks_run[docs/benchmarl.md]'
test: $(STAMP) $(TORCHRL_STAMP) $(TORCHRL_OLD_STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile
	MARL_ENVS_REQUIRE_TORCHRL=1 $(TORCHRL_BIN)/python -m pytest -n 2 --dist loadfile
	$(REQUIRE_OLD) $(TORCHRL_OLD_BIN)/python -m pytest -n 2 --dist loadfile $(OLD_TORCHRL_TESTS)
	$(MAKE) --no-print-directory wheel-check

test-all: $(STAMP) $(TORCHRL_STAMP) $(TORCHRL_OLD_STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile --all
	MARL_ENVS_REQUIRE_TORCHRL=1 $(TORCHRL_BIN)/python -m pytest -n 2 --dist loadfile --all
	$(REQUIRE_OLD) $(TORCHRL_OLD_BIN)/python -m pytest -n 2 --dist loadfile --all $(OLD_TORCHRL_TESTS)
	$(MAKE) --no-print-directory wheel-check

wheel-check: $(STAMP)
	rm -rf dist $(WHEEL_VENV)
	$(BIN)/python -m build --outdir dist . >/dev/null
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(WHEEL_VENV)/bin/python -m pip install --quiet "$(TORCH_SPEC)"
	$(WHEEL_VENV)/bin/python -m pip install --quiet "$$(ls dist/*.whl)[vmas]" "$(TORCH_SPEC)"
	$(WHEEL_VENV)/bin/python scripts/check_wheel.py README.md
	@ls dist

# The env catalogue (docs/envs) is generated from the registry; its pictures are cached in docs/_build.
docs: $(DOCS_STAMP)
	$(BIN)/python -m sphinx -W --keep-going -q -b html docs docs/_build/html
	@echo "docs: docs/_build/html/index.html"

clean:
	rm -rf $(VENV) $(TORCHRL_VENV) $(TORCHRL_OLD_VENV) $(WHEEL_VENV) dist .pytest_cache .hypothesis docs/_build docs/envs
