"""Property: any social world survives a round trip through both of the paper's JSON forms."""

from __future__ import annotations

import asyncio
from pathlib import Path

from helpers import STORY, good_parse
from hypothesis import example, given, settings
from hypothesis import strategies as st

from swm.checkpoints import async_sqlite_saver
from swm.context import SWMContext
from swm.graphs import ask
from swm.schemas import ReasonedAnswer
from swm.state import SocialStep, SocialWorld, split_mental_state
from swm.testing import ScriptedChatModel

names = st.text(st.characters(whitelist_categories=("Lu", "Ll")), min_size=1, max_size=8)
text = st.text(st.characters(blacklist_characters="<>:", blacklist_categories=("Cs", "Cc")), min_size=1,
               max_size=30).map(str.strip).filter(lambda t: t and t.lower() != "none")


@st.composite
def worlds(draw: st.DrawFn) -> SocialWorld:
    agents = draw(st.lists(names, min_size=1, max_size=4, unique_by=lambda n: n.casefold()))
    steps = []
    for index in range(draw(st.integers(1, 4))):
        per_agent = st.dictionaries(st.sampled_from(agents), text, max_size=len(agents))
        steps.append(SocialStep(
            timestep=str(index), scene=draw(text), observations=draw(per_agent),
            mental_states=draw(per_agent), actions=draw(per_agent), dialogue=draw(per_agent)))
    world = SocialWorld(agents=agents, steps=steps)
    for step in world.steps:  # the canonical form: every agent observes and acts, if only "none"
        for agent in agents:
            step.observations.setdefault(agent, "none")
            step.actions.setdefault(agent, "none")
    return world


# runs of spaces beside a mental state were once collapsed ('0  0' came back as '0 0')
SPACED = SocialWorld(agents=["A"], steps=[SocialStep(
    timestep="0", scene="0", observations={"A": "0  0"}, mental_states={"A": "0"}, actions={"A": "none"})])


@settings(max_examples=150, deadline=None)
@given(worlds())
@example(SPACED)
def test_dict_and_list_forms_round_trip(world: SocialWorld) -> None:
    assert SocialWorld.from_s3ap(world.to_s3ap()) == world
    assert SocialWorld.from_s3ap(world.to_model_form()) == world


def test_mental_state_tags_split_cleanly_wherever_they_stand() -> None:
    assert split_mental_state("0  0 <mental_state>0</mental_state>") == ("0  0", "0")
    assert split_mental_state("<mental_state>calm</mental_state> sees  it") == ("sees  it", "calm")
    assert split_mental_state("saw<mental_state>x</mental_state>it") == ("saw it", "x")
    assert split_mental_state("a <mental_state>x</mental_state> b") == ("a b", "x")


def test_async_checkpointer_runs_and_resumes(tmp_path: Path) -> None:
    async def main() -> tuple[str, int]:
        model = ScriptedChatModel(replies=[good_parse(), ReasonedAnswer(reasoning="r", answer="basket")])
        config = {"configurable": {"thread_id": "async-1"}}
        async with async_sqlite_saver(tmp_path / "a.db") as saver:
            graph = ask.build().compile(checkpointer=saver)
            out = await graph.ainvoke({"narrative": STORY, "question": "Where?"}, config,
                                      context=SWMContext(llm=model))
            history = [s async for s in graph.aget_state_history(config)]
        return out["answer"], len(history)

    answer, checkpoints_written = asyncio.run(main())
    assert answer == "basket" and checkpoints_written >= 4
