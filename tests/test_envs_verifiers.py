"""swm-social under verifiers: each seat's recorded reward is swm's, item for item, against the loopback fake server.

verifiers (the ``[verifiers]`` extra, in ``[dev]``) plays every seat through its ``null`` harness: a chat
program that ``uv`` makes an environment for once and runs in a local subprocess, its model calls relayed
by verifiers' interception server to `swm.testing.FakeOpenAIServer`, whose replies are scripted from the
prompt (tests/test_envs_seats.py's `ScriptedPolicy`). uv makes that environment from the wheels
`scripts/install` keeps (``.venv/wheels/verifiers-chat``) with no index, so no test reaches the network.
For a decision of every family, two-turn tasks, an episode, a two-seat task, Werewolf, a judged episode
and a SOTOPIA scenario (scored by SOTOPIA's evaluator, its reply scripted), the episode's traces are
checked against swm's own code on the same transcript: the seat's replies, read back from its trace,
replayed through `swm.envs.seats.SocialEnv` give the reward each trace recorded and the checker's
verdict, and that reward is swm's rule on the checker's verdict (`seat_rewards`).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections import deque
from pathlib import Path
from typing import Any

import pytest
import verifiers.v1 as vf
from test_envs_seats import ScriptedPolicy, evaluation, seat_rewards

from swm.envs.seats import SocialEnv, reply_generation
from swm.envs.verifiers_env import CHAT_PROGRAM_ENV, SwmSocialEnvConfig
from swm.llm import make_chat_model
from swm.scenarios import shipped
from swm.selfplay.rewards import RewardConfig
from swm.tasks import check, synthesize
from swm.tasks.decisions import Stop
from swm.testing import FakeOpenAIServer
from swm.training.trajectory import Generation

WHEELS = Path(sys.prefix) / "wheels" / "verifiers-chat"


def player() -> dict[str, Any]:
    """The ``player`` agent: the ``null`` harness in a subprocess, its chat program's environment made by this
    environment's ``uv`` from the kept wheels, with no index and no Python download."""
    if not any(WHEELS.glob("openai-*.whl")):
        pytest.fail(f"no wheels of verifiers' chat program in {WHEELS}: run `bash scripts/install`")
    env = {**CHAT_PROGRAM_ENV, "UV_NO_INDEX": "1", "UV_FIND_LINKS": str(WHEELS), "UV_PYTHON": sys.executable,
           "UV_PYTHON_DOWNLOADS": "never", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return {"harness": {"id": "null", "env": env}, "runtime": {"type": "subprocess"}}


SHAPES = [("negotiation", "decision"), ("mutual_friend", "decision"), ("secret", "decision"),
          ("scheduling", "decision"), ("persuasion", "decision"), ("secret", "two-turn"),
          ("negotiation", "two-turn"), ("negotiation", "easy"), ("mutual_friend", "two-seat"), ("werewolf", "easy")]


class Replay:
    """One seat's replies, read back from its verifiers trace, given in order (a `Sampler`)."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = deque(replies)

    def generate(self, prompt: str, prefill: str = "", stop: Stop = None,
                 max_tokens: int | None = None) -> Generation:
        return reply_generation(prompt, self.replies.popleft(), prefill, stop)


def traces_of(server: FakeOpenAIServer, taskset: dict[str, Any], **env: Any) -> list[Any]:
    """Run the one task of ``taskset`` as a verifiers episode against ``server``; its traces."""
    environment = vf.load_environment(SwmSocialEnvConfig(taskset={"id": "swm-social", **taskset}, player=player(),
                                                          **env))
    (task,) = list(environment.taskset)
    ctx = vf.ModelContext(model="fake", client=vf.EvalClientConfig(base_url=server.base_url, api_key_var="FAKE_KEY"))

    async def run() -> Any:
        async with environment.serving():
            return await environment.run_episode(task, ctx)

    episode = asyncio.run(run())
    assert episode.ok, [e.message for e in episode.errors]
    return list(episode.traces)


def play(server: FakeOpenAIServer, family: str, level: str, seed: int, **env: Any) -> list[Any]:
    """One verifiers episode of swm's task (family, level, seed) against ``server``; its traces."""
    return traces_of(server, {"families": [family], "levels": [level], "seeds": 1, "first_seed": seed},
                     quality_filter=False, **env)


def replies(trace: Any) -> list[str]:
    return [(n.message.content or "").strip() for n in trace.nodes if n.sampled]


def check_traces(family: str, level: str, seed: int, traces: list[Any], reward: RewardConfig,
                 judge: Any = None, judged: float = 0.0, max_turns: int = 8) -> None:
    task = synthesize(family, level, seed)
    env = SocialEnv([], [], reward=reward, max_turns=max_turns, judge=judge)
    by_seat = {t.info["swm"]["seat"]: t for t in traces}
    assert set(by_seat) == set(env.seats(task)) and {t.agent.name for t in traces} == {"player"}
    episode = env.run(task, {seat: Replay(replies(t)) for seat, t in by_seat.items()})
    assert episode.failed is None
    verdict = check(task, episode.utterances).model_dump()
    expected = seat_rewards(task, episode)
    for seat, trace in by_seat.items():
        assert trace.info["swm"]["verdict"] == episode.verdict == verdict
        assert trace.rewards["swm"].score == pytest.approx(episode.rewards[seat])
        turns = sum(1 for m in episode.moves if m.seat == seat and m.reward is not None)
        assert trace.rewards["swm"].score == pytest.approx(expected[seat] + judged * turns)
        assert len(replies(trace)) == turns, "one model call per move of the seat"


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_KEY", "sk-no-key-needed")


# The scripted policy's seed per family (7 otherwise). Werewolf's: seed 7 played deal 0 to a draw after 4 rounds,
# 48 moves (97 s through the subprocess harness); seed 20 plays it in 12 (one night and day, the werewolf voted
# out), so the ±1 for the side that won is on every seat's reward, with an illegal move's −0.5 beside it.
POLICY_SEED = {"werewolf": 20}
# An episode (level easy) of 4 turns: each seat moves twice, its second move seeing its first in its conversation,
# as with 8, at half the chat-program starts (one a move, a CPU-second each). Negotiation's policy seed 8 leaks a
# price at turns 1 and 3 (seed 7 first did at turn 6), so a broken rule's −0.5 is still on a seat's reward.
EPISODE_TURNS = 4
EPISODE_SEED = {"negotiation": 8}


@pytest.mark.parametrize(("family", "level"), SHAPES)
def test_each_seats_reward_is_swms(family: str, level: str) -> None:
    episode = level == "easy" and family != "werewolf"
    policy = ScriptedPolicy(seed=(EPISODE_SEED if episode else POLICY_SEED).get(family, 7))
    turns = EPISODE_TURNS if episode else 8
    with FakeOpenAIServer(scripts={"<text>": policy}) as server:
        traces = play(server, family, level, 0, max_turns=turns)
        check_traces(family, level, 0, traces, RewardConfig(quality_filter=False), max_turns=turns)
    if episode:
        assert len(policy.replies) == EPISODE_TURNS
        assert traces[0].info["swm"]["verdict"]["violations"], "a broken rule's penalty is on a seat's reward"
    if family == "werewolf":  # the seed above still plays the short game that a side wins
        verdict = traces[0].info["swm"]["verdict"]
        assert verdict["detail"]["winner"] == "village" and len(policy.replies) == 12, verdict["detail"]


def test_an_episode_with_the_judge_is_scored_as_swm_scores_it() -> None:
    policy = ScriptedPolicy(seed=3)
    scripts = {"<text>": policy, "TurnScore": {"reasoning": "fine", "score": 7}}
    with FakeOpenAIServer(scripts=scripts) as server:
        traces = play(server, "persuasion", "easy", 0, judge_model=server.model_spec, judge_weight=0.5,
                      max_turns=EPISODE_TURNS)
        check_traces("persuasion", "easy", 0, traces, RewardConfig(quality_filter=False, judge_weight=0.5),
                     judge=make_chat_model(server.model_spec), judged=0.5 * 0.7, max_turns=EPISODE_TURNS)
    assert len(policy.replies) == EPISODE_TURNS, "every turn of the episode played and judged"


def test_a_sotopia_scenario_is_scored_by_sotopias_evaluator() -> None:
    scenario = shipped()[0]
    scripts = {"<text>": ScriptedPolicy(seed=4), "EnvResponse": evaluation([8, 2])}
    with FakeOpenAIServer(scripts=scripts) as server:
        traces = traces_of(server, {"families": [], "levels": [], "scenarios": [scenario.id]}, max_turns=4,
                           judge_model=server.model_spec)
        by_seat = {t.info["swm"]["seat"]: t for t in traces}
        env = SocialEnv([], [], max_turns=4, judge=make_chat_model(server.model_spec))
        replayed = env.run_scenario(scenario, {seat: Replay(replies(t)) for seat, t in by_seat.items()})
    assert replayed.rewards == {scenario.names[0]: 0.8, scenario.names[1]: 0.2}
    assert {seat: t.rewards["swm"].score for seat, t in by_seat.items()} == pytest.approx(replayed.rewards)
    assert all(t.info["swm"]["verdict"] == replayed.verdict for t in by_seat.values())
