"""Unknown keys in a plan are refused before any work, naming the key and the closest valid one."""

from __future__ import annotations

import pytest

from swm.context import SWMContext
from swm.errors import InputError
from swm.testing import ScriptedChatModel


@pytest.mark.parametrize(("graph", "plan", "message"), [
    ("selfplay", {"iteratons": 3}, "plan.iteratons: Extra inputs are not permitted (did you mean 'iterations'?)"),
    ("selfplay", {"ppo": {"lrr": 0.1}}, "plan.ppo.lrr: Extra inputs are not permitted (did you mean 'lr'?)"),
    ("lifelong", {"cycels": 2}, "plan.cycels: Extra inputs are not permitted (did you mean 'cycles'?)"),
    ("lifelong", {"zzz": 2}, "plan.zzz: Extra inputs are not permitted"),
])
def test_a_plan_typo_names_the_closest_key_before_any_call(graph: str, plan: dict, message: str) -> None:  # type: ignore[type-arg]
    import importlib

    module = importlib.import_module(f"swm.graphs.{graph}")
    llm = ScriptedChatModel(replies=[])
    with pytest.raises(InputError) as refused:
        module.build().compile().invoke({"plan": plan}, context=SWMContext(llm=llm))
    assert message in str(refused.value)
    assert "did you mean" not in message or str(refused.value).count("did you mean") == 1
    assert llm.calls == 0


def test_a_context_typo_is_refused_in_python() -> None:
    with pytest.raises(TypeError, match="modle"):
        SWMContext(modle="gpt-4o")  # type: ignore[call-arg]
