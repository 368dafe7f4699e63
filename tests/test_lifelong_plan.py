"""The lifelong plan: one typed model, plans stored under earlier names still read, families read from the registry."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from swm.cli import main
from swm.games import GAMES
from swm.games.werewolf import Werewolf
from swm.lifelong.plan import LifelongPlan
from swm.tasks.families import FAMILIES, task_families


def test_a_plan_stored_under_the_earlier_names_reads_as_the_current_one() -> None:
    old = LifelongPlan.model_validate({"policy": "rollout", "eval_policy": "foresee", "cycles": 2})
    assert (old.act_strategy, old.eval_act_strategy, old.cycles) == ("lookahead", "foresee", 2)
    assert "policy" not in old.model_dump()


def test_an_unknown_strategy_or_key_is_still_refused() -> None:
    with pytest.raises(ValidationError):
        LifelongPlan.model_validate({"act_strategy": "greedy"})
    with pytest.raises(ValidationError):
        LifelongPlan.model_validate({"polcy": "plain"})


class Mafia(Werewolf):
    """Werewolf under another name: a game row that only this file registers."""

    name = "mafia"


def test_a_game_registered_in_a_test_is_a_family_the_plan_accepts_and_swm_learn_offers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan's families are read from the registry when it is built, never typed out: a game registered here
    (no line of swm/lifelong/plan.py changed) is accepted, offered by ``swm learn``, and listed by the schema."""
    with pytest.raises(ValidationError, match="unknown task family 'mafia'"):
        LifelongPlan(families=["mafia"])
    monkeypatch.setitem(GAMES, "mafia", Mafia())
    plan = LifelongPlan(families=["negotiation", "mafia"], eval_families=["mafia"])
    assert (plan.families, plan.eval_families) == (["negotiation", "mafia"], ["mafia"])
    learn = main.commands["learn"]  # type: ignore[attr-defined]
    for option in ("families", "eval_families"):
        param = next(p for p in learn.params if p.name == option)
        assert param.type.convert("secret,mafia", param, None) == ["secret", "mafia"]
        assert "mafia" in param.type.allowed
    fields = LifelongPlan.model_json_schema()["properties"]
    assert fields["families"]["items"]["enum"] == list(task_families()) and "mafia" in task_families()
    assert fields["eval_families"]["anyOf"][0]["items"]["enum"] == list(task_families())


def test_an_unknown_family_is_refused_in_one_line_naming_the_families() -> None:
    with pytest.raises(ValidationError) as caught:
        LifelongPlan(families=["negotiation", "negotation"])
    (error,) = caught.value.errors()
    assert error["loc"] == ("families", 1)
    assert error["msg"] == ("Value error, unknown task family 'negotation' (did you mean 'negotiation'?); the "
                            f"families are {', '.join(task_families())}")
    assert LifelongPlan().families == list(FAMILIES) and "werewolf" in task_families()
