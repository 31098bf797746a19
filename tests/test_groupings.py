import subprocess
import sys

import pytest

from groupings import MarlGroupMapType, check_marl_grouping, default_group_map

AGENTS = ["agent_0", "agent_1", "agent_2"]


def test_strategies():
    assert MarlGroupMapType.ALL_IN_ONE_GROUP.get_group_map(["a_0", "a_1"]) == {"agents": ["a_0", "a_1"]}
    assert MarlGroupMapType.ONE_GROUP_PER_AGENT.get_group_map(["a_0", "a_1"]) == {"a_0": ["a_0"], "a_1": ["a_1"]}


def test_valid_grouping_passes():
    assert check_marl_grouping({"agents": AGENTS}, AGENTS) is None
    assert check_marl_grouping({"x": ["agent_2"], "y": ["agent_0", "agent_1"]}, AGENTS) is None


@pytest.mark.parametrize(
    "group_map, agents, match",
    [
        ({}, [], "No agents passed"),
        ({"a": ["x", "x"]}, ["x", "x"], "There are agents with the same name: 'x'"),
        ({"a": ["x"], "b": ["y"], "c": []}, ["x", "y"], "Number of groups 3 greater than number of agents 2"),
        ({"a": [], "b": AGENTS}, AGENTS, "Group a is empty"),
        ({"a": ["agent_0", "agent_9"]}, ["agent_0"], "Agent agent_9 wasn't present in environment \\(group 'a'\\)"),
        ({"a": ["agent_0"], "b": ["agent_0", "agent_1", "agent_2"]}, AGENTS,
         "Agent agent_0 present more than once: in group 'a' and group 'b'"),
        ({"a": ["agent_0", "agent_0", "agent_1", "agent_2"]}, AGENTS, "Agent agent_0 present more than once"),
        ({"a": ["agent_0"], "b": ["agent_1"]}, AGENTS, "Agent agent_2 wasn't found in any group"),
        ({"": AGENTS}, AGENTS, "Group name '' is not a non-empty string"),
        ({3: AGENTS}, AGENTS, "Group name 3 is not a non-empty string"),
        ({"done": AGENTS}, AGENTS, "Group name 'done' clashes with a root key"),
        ({"next": AGENTS}, AGENTS, "Group name 'next' clashes with a root key"),
        ({"a": "agent_0"}, ["agent_0"], "Group a must be a list of agent names"),
        ([("a", AGENTS)], AGENTS, "group_map must be a dict"),
    ],
)
def test_bad_grouping(group_map, agents, match):
    with pytest.raises(ValueError, match=match):
        check_marl_grouping(group_map, agents)


def test_default_all_alike():
    assert default_group_map(AGENTS) == {"agents": AGENTS}
    assert default_group_map(["alice", "bob"], ["s", "s"]) == {"agents": ["alice", "bob"]}


def test_default_by_prefix_keeps_order():
    names = ["adversary_0", "agent_0", "agent_1"]
    assert default_group_map(names, ["big", "small", "small"]) == {"adversary": ["adversary_0"], "agent": ["agent_0", "agent_1"]}


def test_default_unsuffixed_agents_get_own_group():
    names = ["leader", "follower_0", "follower_1"]
    assert default_group_map(names, [1, 2, 2]) == {"leader": ["leader"], "follower": ["follower_0", "follower_1"]}


def test_default_splits_heterogeneous_prefix_group():
    names = ["agent_0", "agent_1", "eve_0"]
    assert default_group_map(names, [1, 2, 3]) == {"agent_0": ["agent_0"], "agent_1": ["agent_1"], "eve": ["eve_0"]}


def test_default_never_uses_a_reserved_name():
    group_map = default_group_map(["done", "agent_0"], [1, 2])
    assert group_map == {"done_group": ["done"], "agent": ["agent_0"]}
    check_marl_grouping(group_map, ["done", "agent_0"])


def test_default_signature_count_must_match():
    with pytest.raises(ValueError, match="got 1 signatures for 3 agents"):
        default_group_map(AGENTS, [1])


def test_groupings_is_pure_python():
    code = "import sys, groupings; assert 'torch' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_default_group_map_takes_signatures_by_agent_name():
    names = ["adversary_0", "agent_0", "agent_1"]
    by_name = {"agent_1": "s2", "adversary_0": "s1", "agent_0": "s2"}
    assert default_group_map(names, by_name) == default_group_map(names, ["s1", "s2", "s2"]) == {
        "adversary": ["adversary_0"], "agent": ["agent_0", "agent_1"]
    }
    with pytest.raises(ValueError, match=r"agents \['agent_1'\] have none and \['agent_9'\] are not among"):
        default_group_map(names, {"adversary_0": "s1", "agent_0": "s2", "agent_9": "s2"})
    with pytest.raises(TypeError, match="signatures must be a sequence with one signature per agent"):
        default_group_map(names, {"s1", "s2"})
    with pytest.raises(TypeError, match="got str 'abc'"):
        default_group_map(names, "abc")
