import pytest
from envs import PredatorPreyCount

import marl_envs
from marl_envs import cli, registry


@pytest.fixture(autouse=True)
def user_env(monkeypatch):
    monkeypatch.setattr(registry, "_USER_ENVS", {})
    marl_envs.register("test/predator_prey", PredatorPreyCount)


def test_list_user(capsys):
    assert cli.main(["list", "user"]) == 0
    assert capsys.readouterr().out.split() == ["test/predator_prey"]


def test_info_prints_groups_and_every_key(capsys):
    assert cli.main(["info", "test/predator_prey", "n_predators=3"]) == 0
    out = capsys.readouterr().out
    assert "predator  predator_0, predator_1, predator_2  3" in out
    assert "predator.action       action       (1, 3, 2)  float32  Bounded[-1, 1]" in out
    assert "prey.action           action       (1, 1)     int64    Categorical(n=5)" in out
    assert "next.prey.reward      reward       (1, 1, 1)  float32  Unbounded" in out
    assert "prey.truncated        done         (1, 1, 1)  bool     Binary" in out


def test_errors_are_one_line_with_exit_code_2(capsys):
    assert cli.main(["info", "test/predator_pray"]) == 2
    assert "error: unknown env 'test/predator_pray'; did you mean 'test/predator_prey'?" in capsys.readouterr().err
    assert cli.main(["info", "test/predator_prey", "n_predator=3"]) == 2
    assert "unexpected keyword argument 'n_predator'; did you mean 'n_predators'?" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="expected KEY=VALUE, got 'n_predators'"):
        cli.main(["info", "test/predator_prey", "n_predators"])


def test_parse_kwargs_literals():
    assert cli.parse_kwargs(["a=3", "b=0.5", "c=cpu", "d=True", "e=[1, 2]"]) == {"a": 3, "b": 0.5, "c": "cpu", "d": True, "e": [1, 2]}
