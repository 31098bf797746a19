import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the test envs in tests/envs.py


def pytest_addoption(parser):
    parser.addoption("--all", action="store_true", default=False, help="also run heavy sweeps (marked slow)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--all"):
        return
    skip = pytest.mark.skip(reason="heavy sweep: run with --all")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
