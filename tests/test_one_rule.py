"""Each rule of the env contract is written once in ``src/marl_envs`` and called from every place that needs it.

A second copy of a rule is found by the shape of its code: each pattern below matches what a copy of the rule
would have to write, and is allowed only in the module that owns the rule. A new caller calls the owner
(``env.action_mask_keys``, ``env._reset_mask``, ``env._check_ready``, ``rules.TimeLimit``, ``rules.where_rows``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import marl_envs
from marl_envs._core import rules, spec_keys

SRC = Path(marl_envs.__file__).parent

#: rule -> (the pattern a copy of it would write, the one module allowed to write it)
RULES = {
    # the key of an action's mask: (group, "action_mask") beside (group, "action")
    "action-mask key": (r'\[:-1\][^\n]*"action_mask"', "_core/spec_keys.py"),
    # which envs a "_reset" entry selects: read from the data's "_reset" entries
    "_reset selection": (r'\.get\(\s*("_reset"|key\b[^\n]*reset)|for \w+ in [\w.]*reset_keys', "_core/spec_keys.py"),
    # a step (or render) before the first reset()
    "before reset()": (r'before reset\(\)', "_core/env.py"),
    # the time limit: a step count compared with max_steps
    "time limit": (r'\w*(count|steps)\w*\s*>=\s*[\w.]*(max_steps|limit)\b', "_core/rules.py"),
    # the merge by env: one row mask broadcast over an entry's trailing dims to pick new or old rows
    "merge by env": (r'where\(\s*[\w.]+(\.view|\.reshape)\(', "_core/rules.py"),
}


def _prose(line: str) -> bool:
    """A comment or a docstring's line (which may quote a library's rule: ``step >= max_steps``)."""
    return line.lstrip().startswith("#") or "``" in line


def _sources():
    for path in sorted(SRC.rglob("*.py")):
        yield path.relative_to(SRC).as_posix(), path.read_text()


@pytest.mark.parametrize("rule", sorted(RULES))
def test_a_rule_is_written_in_one_module(rule):
    pattern, owner = RULES[rule]
    copies = [(name, line) for name, text in _sources() if name != owner
              for line in text.splitlines() if re.search(pattern, line) and not _prose(line)]
    assert not copies, f"a second copy of the {rule} rule (written in {owner}): {copies}"
    assert re.search(pattern, (SRC / owner).read_text()), f"{owner} no longer writes the {rule} rule: update RULES"


def test_the_patterns_find_a_copy():
    """Each pattern matches the copy it is there to catch (else the test above could not fail)."""
    copies = {
        "action-mask key": 'mask = (*key[:-1], "action_mask")',
        "_reset selection": 'root = tensordict.get("_reset", None)',
        "before reset()": 'raise RuntimeError("step() before reset(): reset the env first")',
        "time limit": "truncated = steps >= self.max_steps",
        "merge by env": "value = torch.where(done.view(-1, 1), fresh, value)",
    }
    assert set(copies) == set(RULES)
    for rule, line in copies.items():
        assert re.search(RULES[rule][0], line), rule


def test_the_owners_are_the_functions_callers_use():
    assert "_reset_mask" in vars(spec_keys.SpecsAndKeys) and "action_mask_keys" in vars(spec_keys.SpecsAndKeys)
    assert callable(rules.where_rows) and callable(rules.TimeLimit.reached)
