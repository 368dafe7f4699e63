"""The lifelong plan: one typed model, and plans stored under earlier names still read."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from swm.lifelong.plan import LifelongPlan


def test_a_plan_stored_under_the_earlier_names_reads_as_the_current_one() -> None:
    old = LifelongPlan.model_validate({"policy": "rollout", "eval_policy": "foresee", "cycles": 2})
    assert (old.act_strategy, old.eval_act_strategy, old.cycles) == ("lookahead", "foresee", 2)
    assert "policy" not in old.model_dump()


def test_an_unknown_strategy_or_key_is_still_refused() -> None:
    with pytest.raises(ValidationError):
        LifelongPlan.model_validate({"act_strategy": "greedy"})
    with pytest.raises(ValidationError):
        LifelongPlan.model_validate({"polcy": "plain"})
