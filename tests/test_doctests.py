import doctest

import pytest

import groupings
import marl_envs
from marl_envs import distributed, specs


@pytest.mark.parametrize("module", [groupings, specs, distributed, marl_envs], ids=lambda m: m.__name__)
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
