"""The episode graph: turn order, termination, observation routing, privacy and the stored world."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from test_episode_scripts import GOALS, SECRETS, Responder, model, scenario

from swm.checkpoints import ExperienceStore, sqlite_saver
from swm.context import SWMContext
from swm.errors import InputError
from swm.graphs.episode import build
from swm.nodes.env import end_reason, next_actor, observers_of
from swm.social.models import AgentAction, AgentActionForModel
from swm.social.store import get_episode, load_turns
from swm.testing import ScriptedChatModel


def play(tmp_path: Path, ctx: SWMContext, thread: str = "t", **inputs: Any) -> dict[str, Any]:
    inputs.setdefault("scenario", scenario().model_dump())
    with sqlite_saver(tmp_path / "cp.db") as saver:
        graph = build().compile(checkpointer=saver)
        return graph.invoke(inputs, {"configurable": {"thread_id": thread}}, context=ctx)


def store_ctx(tmp_path: Path, **kwargs: Any) -> SWMContext:
    return SWMContext(store=ExperienceStore(tmp_path / "store.db"), **kwargs)


def test_round_robin_until_turn_limit(tmp_path: Path) -> None:
    ctx = store_ctx(tmp_path, llm=model())
    out = play(tmp_path, ctx, scenario=scenario(3).model_dump(), max_turns=7, judge=False)
    turns = load_turns(ctx.store, out["episode_id"])
    assert [t.agent for t in turns] == ["Ann", "Bob", "Cy", "Ann", "Bob", "Cy", "Ann"]
    assert out["end_reason"] == "turn limit (7)" and out["turn"] == 7
    world = out["world"]
    assert world.agents == ["Ann", "Bob", "Cy"] and len(world.steps) == 7
    assert world.steps[1].dialogue == {"Bob": "line 1"}
    assert (get_episode(ctx.store, out["episode_id"]) or {})["status"] == "done"


def test_ends_after_more_than_two_idle_turns(tmp_path: Path) -> None:
    actions = ["speak", "none", "none", "none", "speak"]
    responder = Responder(action=lambda i: AgentActionForModel(action_type=actions[i], argument=""))
    ctx = store_ctx(tmp_path, llm=ScriptedChatModel(respond=responder))
    out = play(tmp_path, ctx, max_turns=20, judge=False)
    assert out["turn"] == 4 and out["end_reason"] == "more than 2 consecutive idle turns"


def test_ends_when_fewer_than_two_remain_and_skips_leavers(tmp_path: Path) -> None:
    actions = ["speak", "leave", "speak", "leave"]
    responder = Responder(action=lambda i: AgentActionForModel(action_type=actions[i], argument="x"))
    ctx = store_ctx(tmp_path, llm=ScriptedChatModel(respond=responder))
    out = play(tmp_path, ctx, scenario=scenario(3).model_dump(), max_turns=20, judge=False)
    turns = load_turns(ctx.store, out["episode_id"])
    # Ann speaks, Bob leaves, Cy speaks, Ann leaves -> only Cy remains.
    assert [t.agent for t in turns] == ["Ann", "Bob", "Cy", "Ann"]
    assert out["end_reason"] == "fewer than two agents remain" and out["active"] == ["Cy"]


def test_private_message_reaches_only_its_recipient(tmp_path: Path) -> None:
    responder = Responder(action=lambda i: AgentActionForModel(action_type="speak", argument=f"psst {i}", to=["Bob"]))
    ctx = store_ctx(tmp_path, llm=ScriptedChatModel(respond=responder))
    out = play(tmp_path, ctx, scenario=scenario(3).model_dump(), max_turns=1, judge=False)
    step = out["world"].steps[0]
    assert step.observations["Bob"].startswith("Ann said (privately to Bob)")
    assert step.observations["Ann"] != "none" and step.observations["Cy"] == "none"


def test_env_rules_directly() -> None:
    assert observers_of(AgentAction(action_type="speak", argument="hi", to=["B"]), "A", ["A", "B", "C"]) == ["A", "B"]
    assert observers_of(AgentAction(action_type="speak", argument="hi"), "A", ["A", "C"]) == ["A", "C"]
    assert next_actor(["A", "B", "C"], ["A", "C"], "A") == "C"
    assert end_reason(3, 20, ["A", "B"], 2) is None
    assert end_reason(3, 20, ["A", "B"], 3) is not None
    assert end_reason(20, 20, ["A", "B"], 0) == "turn limit (20)"


@pytest.mark.parametrize("policy", ["plain", "foresee", "lookahead"])
def test_privacy_no_prompt_holds_another_agents_goal_or_secret(tmp_path: Path, policy: str) -> None:
    """Scan every prompt made on an agent's behalf (act, predict, score, refine) for the others' goals and secrets."""
    models = {role: model() for role in ("agent", "partner", "world_model", "judge")}
    ctx = store_ctx(tmp_path, chat_models=models, lookahead_width=2, lookahead_depth=2)
    play(tmp_path, ctx, scenario=scenario(3).model_dump(), max_turns=6,
         policies={"Ann": policy, "Bob": policy, "Cy": "plain"}, judge=False)
    checked = 0
    for role, m in models.items():
        for tool, prompt in m.prompts:
            speaker = next(n for n in GOALS if f'<data name="your name">\n{n}\n' in prompt
                           or f'<data name="acting participant">\n{n}\n' in prompt)
            for other in GOALS:
                if other != speaker:
                    assert GOALS[other] not in prompt and SECRETS[other] not in prompt, (role, tool, speaker, other)
            assert GOALS[speaker] in prompt
            checked += 1
    assert checked >= 6


def test_judge_sees_everything_but_agents_do_not(tmp_path: Path) -> None:
    models = {role: model() for role in ("agent", "partner", "world_model", "judge")}
    ctx = store_ctx(tmp_path, chat_models=models)
    out = play(tmp_path, ctx, max_turns=2)
    judge_prompts = [p for t, p in models["judge"].prompts if t == "EnvResponse"]  # sotopia: one call, all agents
    assert len(judge_prompts) == 1 and all(SECRETS["Bob"] in p and GOALS["Ann"] in p for p in judge_prompts)
    assert set(out["judgements"]) == {"Ann", "Bob"} and out["judge_protocol"] == "sotopia"
    assert {j["protocol"] for j in out["judgements"].values()} == {"sotopia"}
    assert out["judgements"]["Ann"]["overall"] == pytest.approx((5 + 0 + 5 - 5 - 5 + 0 + 5) / 7, abs=1e-3)


def test_invalid_inputs_are_refused(tmp_path: Path) -> None:
    ctx = store_ctx(tmp_path, llm=model())
    with pytest.raises(InputError):
        play(tmp_path, ctx, thread="a", policies={"Ann": "telepathy"})
    with pytest.raises(InputError):
        play(tmp_path, ctx, thread="b", max_turns=0)
    with pytest.raises(InputError):
        play(tmp_path, ctx, thread="c", scenario={"id": "x", "scenario": "y", "agents": []})


def test_the_scenario_input_is_typed_and_takes_a_scenario_id(tmp_path: Path) -> None:
    schema = build().compile().get_input_jsonschema()
    options = schema["properties"]["scenario"]["anyOf"]
    assert {"type": "string"} in options  # a shipped or SOTOPIA id
    defs = schema.get("$defs", {})
    typed = [defs[o["$ref"].split("/")[-1]] for o in options if "$ref" in o]
    assert any({"id", "scenario", "agents"} <= set(t.get("properties", {})) for t in typed)  # the Scenario itself
    assert any(set(t.get("properties", {})) == {"id", "ref"} for t in typed)  # its stored reference
    ctx = store_ctx(tmp_path, llm=model())
    out = play(tmp_path, ctx, thread="by-id", scenario="swm-bike-sale", max_turns=2, judge=False)
    assert (get_episode(ctx.store, out["episode_id"]) or {})["scenario_id"] == "swm-bike-sale"
    with pytest.raises(InputError, match="no scenario 'no-such-scenario'") as refused:
        play(tmp_path, ctx, thread="unknown", scenario="no-such-scenario", max_turns=2, judge=False)
    assert "did you mean" not in refused.value.one_line()
    with pytest.raises(InputError) as misspelt:  # one letter off a shipped id: the id is named
        play(tmp_path, ctx, thread="typo", scenario="swm-bike-sal", max_turns=2, judge=False)
    assert "did you mean 'swm-bike-sale'?" in misspelt.value.one_line()


def test_state_stays_small_turns_live_in_the_store(tmp_path: Path) -> None:
    """The checkpointed state does not grow with the turns: no list of steps in it until the end."""
    ctx = store_ctx(tmp_path, llm=model())
    with sqlite_saver(tmp_path / "cp.db") as saver:
        graph = build().compile(checkpointer=saver)
        config: RunnableConfig = {"configurable": {"thread_id": "s"}}
        inputs: dict[str, Any] = {"scenario": scenario().model_dump(), "max_turns": 8, "judge": False}
        graph.invoke(inputs, config, context=ctx)
        sizes = [len(repr(s.values)) for s in graph.get_state_history(config) if s.values.get("world") is None
                 and s.values.get("turn")]
    assert sizes and max(sizes) - min(sizes) < 400


def _unbounded(schema: dict[str, Any], defs: dict[str, Any], path: str = "") -> list[str]:
    if "$ref" in schema:
        return _unbounded(defs[schema["$ref"].split("/")[-1]], defs, path)
    problems = []
    kind = schema.get("type")
    if kind == "string" and "enum" not in schema and not 0 < schema.get("maxLength", 10**9) <= 1000:
        problems.append(f"{path}: string without maxLength <= 1000")
    if kind == "array":
        if "maxItems" not in schema:
            problems.append(f"{path}: array without maxItems")
        problems += _unbounded(schema.get("items", {}), defs, f"{path}[]")
    if kind == "integer" and "enum" not in schema:
        problems.append(f"{path}: integer without an enum of allowed values")
    for name, sub in (schema.get("properties") or {}).items():
        problems += _unbounded(sub, defs, f"{path}.{name}")
    for sub in schema.get("anyOf", []):
        problems += _unbounded(sub, defs, path)
    return problems


def test_model_facing_schemas_are_bounded() -> None:
    from swm.social.judgement import SotopiaEvaluation, missing_schema
    from swm.social.models import action_schema_for
    from swm.social.schemas import Foresight, FutureScore, foresight_for

    others = ("Bob", "Cy")
    for schema in (action_schema_for(others), AgentActionForModel, foresight_for(others), Foresight, FutureScore,
                   SotopiaEvaluation, missing_schema(["goal", "secret"])):
        js = schema.model_json_schema()
        assert _unbounded(js, js.get("$defs", {})) == [], schema.__name__
    from pydantic import BaseModel

    class Loose(BaseModel):
        text: str
        numbers: list[int]

    assert len(_unbounded(Loose.model_json_schema(), {})) == 3  # the walker does catch unbounded fields
    to = action_schema_for(others).model_json_schema()["properties"]["to"]
    assert to["maxItems"] == 2


def _common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


@pytest.mark.parametrize("order", ["sotopia", "prefix"])
def test_the_prefix_order_leaves_only_the_new_turns_after_a_seats_last_prompt(tmp_path: Path, order: str) -> None:
    """With ``act_order="prefix"`` a seat's next prompt repeats its last up to the new turns: a prefix cache serves
    the instructions, format and background again; SOTOPIA's order sends them again after the conversation."""
    from swm.lifelong.bridge import agent_prompt

    m = model()
    ctx = store_ctx(tmp_path, llm=m, act_order=order)
    out = play(tmp_path, ctx, max_turns=6, judge=False)
    mine = [p for _, p in m.prompts if '<data name="your name">\nAnn\n' in p]
    assert len(mine) == 3
    for last, this in zip(mine, mine[1:], strict=False):
        new = this[len(_common_prefix(last, this)):]
        assert ("Your available action types" in new) == (order == "sotopia"), new[:200]
        assert "Bob said" in new or "Bob" in new, "the turns since the seat's last prompt are what is new"
    turns = load_turns(ctx.store, out["episode_id"])
    name = "episode_act" if order == "sotopia" else "episode_act_prefix"
    assert all(t.prompts["act"].startswith(f"{name}@") for t in turns)
    # the same text either way, in another order: the lifelong bridge rebuilds the prompt each turn was shown
    rebuilt = agent_prompt(scenario(), "Ann", [], 0, turns[0].prompts)
    assert rebuilt == mine[0]
    other = agent_prompt(scenario(), "Ann", [], 0, {"act": "episode_act@v3" if order == "prefix"
                                                   else "episode_act_prefix@v1"})
    assert _lines(other) == _lines(rebuilt)


def _lines(prompt: str) -> list[str]:
    """The prompt's lines in any order, its turn line aside (SOTOPIA's order opens the action types with it)."""
    text = prompt.replace("You are at turn #0. Act now.", "").replace("You are at turn #0. ", "")
    return sorted(line for line in text.split("\n") if line.strip())
