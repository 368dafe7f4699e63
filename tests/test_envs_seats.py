"""The multi-seat environment (`swm.envs.seats.SocialEnv`) against the loopback fake server: its rewards are swm's.

One policy plays every seat through `ChatSampler` over `swm.testing.FakeOpenAIServer`, whose replies
are scripted from the prompt alone (a seeded mix of well-aimed and random moves, so verdicts pass, fail
and break rules). For every decision family, every two-turn shape, an easy episode of every family and
Werewolf games, each episode is checked item for item against swm's own code, recomputed here:

* the transcript holds what the server said, in order (a choice: the option the reply named);
* ``check(task, episode.utterances)`` gives back the episode's verdict, field for field;
* each seat's reward is swm self-play's rule applied to that verdict (quality filter off, so the rule
  is exact): completion 1 plus −0.5 per own turn among a broken rule's turns (at most 2); in Werewolf
  ±1 for the seat's side winning or losing (0 on a draw) plus −0.5 per own illegal move.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
from openai import AsyncOpenAI

from swm.envs.seats import (
    MAX_REPLY_CHARS,
    ChatSampler,
    Episode,
    PolicyReplyError,
    SocialEnv,
    reply_generation,
    run_async,
)
from swm.games import get_game
from swm.games.base import DRAW
from swm.llm import make_chat_model
from swm.scenarios import shipped
from swm.selfplay.rewards import RewardConfig
from swm.selfplay.rollout import seat_message
from swm.social.judgement import DIMENSIONS
from swm.tasks import Task, check, synthesize
from swm.tasks.checkers import is_attempt
from swm.tasks.decisions import Stop
from swm.tasks.families import DECISION, TWO_SEAT, TWO_TURN, decision_families
from swm.testing import FakeOpenAIServer
from swm.training.trajectory import Generation
from swm.training.transcript import SeatChat

REWARD = RewardConfig(quality_filter=False)
_NAME = re.compile(r"\b[A-Z][a-z]+ [A-Z][a-z]+\b")
_SLOT = re.compile(r"\b(?:Mon|Tue|Wed|Thu|Fri) \d\d:\d\d\b")


class ScriptedPolicy:
    """Replies from the prompt only: half the time a move aimed at what the prompt shows, else any move."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.replies: list[str] = []

    def __call__(self, prompt: str, body: dict[str, Any]) -> str:
        rng = self.rng
        names = _NAME.findall(prompt)
        twice = sorted({n for n in names if names.count(n) > 1}) or sorted(set(names)) or ["Nobody Here"]
        slots = _SLOT.findall(prompt)
        shared = sorted({s for s in slots if slots.count(s) > 1}) or sorted(set(slots)) or ["Mon 09:00"]
        prices = re.findall(r"\$\d+", prompt) or ["$1"]
        words = re.findall(r"[A-Za-z]+", prompt)
        firsts = sorted({w for w in words if w[:1].isupper()})
        asks = re.findall(r"agree to ([^.\n]+)\.", prompt)
        worry = re.findall(r"I'm not sure\. ([^\"]+)", prompt)
        aimed = [f"ANSWER: {rng.choice(twice)}" for _ in names[:1]] + [f"SLOT: {rng.choice(shared)}" for _ in slots[:1]]
        aimed += [rng.choice(["ACCEPT", f"COUNTER {rng.choice(prices)}"]) for _ in prices[:1] if "$" in prompt]
        aimed += [f"Nothing much. Could you {a}?" for a in asks] + [f"About that: {w}" for w in worry]
        anything = [f"ANSWER: {rng.choice(twice)}", f"SLOT: {rng.choice(shared)}", "ACCEPT",
                    f"COUNTER {rng.choice(prices)}", " ".join(rng.sample(words, min(5, len(words)))),
                    f"I choose {rng.choice(firsts or ['none'])}.", "none"]
        reply = rng.choice(aimed if aimed and rng.random() < 0.5 else anything)
        self.replies.append(reply)
        return reply


@pytest.fixture()
def served() -> Iterator[tuple[FakeOpenAIServer, ScriptedPolicy]]:
    policy = ScriptedPolicy(seed=7)
    with FakeOpenAIServer(scripts={"<text>": policy}) as server:
        yield server, policy


def seat_rewards(task: Task, episode: Episode) -> dict[str, float]:
    """Each seat's reward by swm's rule, from the checker's verdict on the episode's transcript."""
    verdict = check(task, episode.utterances)
    seats = {str(task.truth["learner"])} if task.level in (DECISION, TWO_TURN) else set(task.names)
    broken = set(verdict.violation_turns) if any(not is_attempt(v) for v in verdict.violations) else set()
    if task.family == "werewolf":
        game = get_game(task.truth["game"])
        state = game.deal(list(task.truth["players"]), int(task.truth["deal_seed"]), dict(task.truth["options"]))
        winner = verdict.detail["winner"]
        out = {}
        for seat in seats:
            own = sum(1 for i, u in enumerate(episode.utterances) if u.agent == seat and i in verdict.violation_turns)
            won = 0.0 if winner in (None, DRAW) else (1.0 if game.side_of(state, seat) == winner else -1.0)
            out[seat] = won - 0.5 * own
        return out
    return {seat: float(verdict.completion) - 0.5 * min(
        len(broken & {i for i, u in enumerate(episode.utterances) if u.agent == seat}), REWARD.max_violations)
        for seat in seats}


def check_episode(task: Task, episode: Episode, replies: list[str], judge: float = 0.0) -> None:
    assert episode.failed is None, episode.failed
    acted = [m for m in episode.moves if m.reward is not None]
    assert len(acted) == len(replies), "one server call per seat move"
    for move, reply in zip(acted, replies, strict=True):
        if move.action_type.endswith("choose"):
            assert not move.text or move.text.split()[0].casefold() in reply.casefold() or "none" in reply
        else:
            assert reply.strip() in move.text
    verdict = check(task, episode.utterances)
    assert episode.verdict == verdict.model_dump()
    expected = seat_rewards(task, episode)
    for seat in expected:  # the judge's term, on every turn the seat took
        expected[seat] += judge * sum(1 for m in episode.moves if m.seat == seat and m.reward is not None)
    assert episode.rewards == pytest.approx(expected)


def play_all(server: FakeOpenAIServer, policy: ScriptedPolicy, env: SocialEnv,
             tasks: list[Task]) -> list[Episode]:
    sampler = ChatSampler(server.base_url, "fake")
    episodes = []
    for task in tasks:
        start = len(policy.replies)
        episode = env.run(task, sampler)
        check_episode(task, episode, policy.replies[start:])
        episodes.append(episode)
    return episodes


def test_decisions_and_two_turn_rewards_are_the_checkers(served: tuple[FakeOpenAIServer, ScriptedPolicy]) -> None:
    server, policy = served
    env = SocialEnv(decision_families(), [DECISION, TWO_TURN], reward=REWARD)
    episodes = play_all(server, policy, env, env.tasks(range(12)))
    for family in decision_families():  # every family reached both a pass and a fail
        verdicts = [e.verdict["completion"] for e in episodes if e.family == family and e.level == DECISION]
        assert any(verdicts) and not all(verdicts), family
    assert any(e.verdict["violations"] for e in episodes)
    assert {e.level for e in episodes} == {DECISION, TWO_TURN}


def test_episode_rewards_are_the_checkers(served: tuple[FakeOpenAIServer, ScriptedPolicy]) -> None:
    server, policy = served
    env = SocialEnv(decision_families(), ["easy"], reward=REWARD, max_turns=6)
    episodes = play_all(server, policy, env, env.tasks(range(3)))
    assert all(len({m.seat for m in e.moves}) >= 2 for e in episodes), "every seat plays"


def test_the_judge_is_mixed_in_as_self_play_mixes_it() -> None:
    """An episode judged by a model (scripted to rate every turn 7/10): each turn earns weight × 0.7 on top."""
    policy = ScriptedPolicy(seed=3)
    with FakeOpenAIServer(scripts={"<text>": policy, "TurnScore": {"reasoning": "fine", "score": 7}}) as server:
        judged = RewardConfig(quality_filter=False, judge_weight=0.5)
        env = SocialEnv(["negotiation", "persuasion"], ["easy"], reward=judged, max_turns=4,
                        judge=make_chat_model(server.model_spec))
        for task in env.tasks(range(2)):
            start = len(policy.replies)
            episode = env.run(task, ChatSampler(server.base_url, "fake"))
            check_episode(task, episode, policy.replies[start:], judge=0.5 * 0.7)
            assert all(m.judge == pytest.approx(0.7) for m in episode.moves)


def test_werewolf_rewards_are_the_moderators(served: tuple[FakeOpenAIServer, ScriptedPolicy]) -> None:
    server, policy = served
    env = SocialEnv(["werewolf"], ["easy"], reward=REWARD)
    tasks = env.tasks(range(3))
    episodes = play_all(server, policy, env, tasks)
    for task, episode in zip(tasks, episodes, strict=True):
        assert {m.seat for m in episode.moves} <= set(task.truth["players"]) == set(episode.rewards)
        assert episode.verdict["detail"]["reason"] != "unfinished"
    assert any(e.verdict["violations"] for e in episodes), "some scripted choices were illegal"


def test_a_scripted_task_is_the_generators() -> None:
    env = SocialEnv(["secret"], [DECISION])
    assert env.tasks([3], split="dev") == [synthesize("secret", DECISION, 3, "dev")]


class SeatLog:
    """One seat's own policy: a `ChatSampler` that keeps the prompts it was given."""

    def __init__(self, sampler: ChatSampler) -> None:
        self.sampler, self.prompts = sampler, []

    def generate(self, prompt: str, prefill: str = "", stop: Stop = None,
                 max_tokens: int | None = None, chat: SeatChat | None = None) -> Generation:
        self.prompts.append(prompt)
        return self.sampler.generate(prompt, prefill, stop, max_tokens, chat=chat)


MIXED = [("persuasion", DECISION), ("secret", TWO_TURN), ("negotiation", "easy"), ("mutual_friend", TWO_SEAT),
         ("werewolf", "easy")]


def test_each_seat_may_be_played_by_its_own_policy() -> None:
    """A policy per seat (an engine's agent per seat) gives the one-policy episode; each sees only its prompts."""
    tasks = [synthesize(f, lv, 2) for f, lv in MIXED]
    env = SocialEnv([], [], reward=REWARD, max_turns=6)
    for task in tasks:
        episodes, logs = [], {}
        for per_seat in (False, True):
            policy = ScriptedPolicy(seed=11)
            with FakeOpenAIServer(scripts={"<text>": policy}) as server:
                sampler = ChatSampler(server.base_url, "fake")
                logs = {seat: SeatLog(sampler) for seat in env.seats(task)}
                episodes.append(env.run(task, logs if per_seat else sampler))
                check_episode(task, episodes[-1], policy.replies)
        one, seated = episodes
        assert seated == one, f"{task.task_id}: the same episode either way"
        for seat, log in logs.items():
            assert log.prompts == [m.prompt for m in seated.moves if m.seat == seat and m.reward is not None]
        assert set(seated.rewards) == set(env.seats(task))


def test_an_async_engine_plays_each_seat_through_its_own_coroutine() -> None:
    """`run_async`: the episode in a worker thread, each seat's move awaited on the engine's loop (verifiers' shape)."""
    tasks = [synthesize(f, lv, 4) for f, lv in MIXED]
    env = SocialEnv([], [], reward=REWARD, max_turns=6)
    policy = ScriptedPolicy(seed=5)
    with FakeOpenAIServer(scripts={"<text>": policy}) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="sk-no-key-needed")
        asked: list[tuple[str, str]] = []

        def seat(name: str) -> Callable[[str], Coroutine[Any, Any, str]]:
            async def turn(prompt: str) -> str:
                asked.append((name, prompt))
                reply = await client.chat.completions.create(model="fake", messages=[{"role": "user",
                                                                                       "content": prompt}])
                return reply.choices[0].message.content or ""
            return turn

        async def play_all() -> list[Episode]:
            return [await run_async(env, task, {s: seat(s) for s in env.seats(task)}) for task in tasks]

        episodes = asyncio.run(play_all())
    start = 0
    for task, episode in zip(tasks, episodes, strict=True):
        acted = [m for m in episode.moves if m.reward is not None]
        check_episode(task, episode, policy.replies[start:start + len(acted)])
        assert asked[start:start + len(acted)] == [(m.seat, m.prompt) for m in acted]
        start += len(acted)
    with pytest.raises(ValueError, match="no turn for seats"):
        asyncio.run(run_async(env, tasks[2], {}))


def evaluation(goals: list[int]) -> dict[str, Any]:
    """SOTOPIA's evaluator reply (``EnvResponse``): every dimension 0 but each agent's goal."""
    return {f"agent_{i + 1}_evaluation": {d: ["scripted", goal if d == "goal" else 0] for d in DIMENSIONS}
            for i, goal in enumerate(goals)}


def test_a_sotopia_scenario_is_scored_by_sotopias_own_evaluator() -> None:
    """Each seat plays with self-play's prompt; the reward is the goal score / 10 SOTOPIA-EVAL gave that seat."""
    scenario = shipped()[0]
    policy = ScriptedPolicy(seed=9)
    scripts = {"<text>": policy, "EnvResponse": evaluation([7, 3])}
    with FakeOpenAIServer(scripts=scripts, record=True) as server:
        env = SocialEnv([], [], max_turns=4, judge=make_chat_model(server.model_spec))
        seats = {seat: ChatSampler(server.base_url, "fake") for seat in env.seats(scenario)}
        episode = env.run_scenario(scenario, seats)
        judged = [b for b in server.bodies() if b.get("tools")]
    names = scenario.names
    assert episode.failed is None and episode.rewards == {names[0]: 0.7, names[1]: 0.3}
    said: list[tuple[str, str]] = []
    chats = {name: SeatChat() for name in names}
    for turn, (move, reply) in enumerate(zip(episode.moves, policy.replies, strict=True)):
        assert move.seat == names[turn % 2] and move.text == reply.strip()
        chat = chats[move.seat]
        assert move.prompt == seat_message(scenario, move.seat, said, turn, chat), "self-play's seat chat, rebuilt"
        chat.extend(move.prompt, move.text, [], [])
        said.append((move.seat, move.text))
    assert all(t.appended == t.append_checked == 0 for t in episode.traces), "no token ids: nothing to check"
    assert [m.reward for m in episode.moves] == [0.0, 0.0, 0.7, 0.3], "each seat's reward at its last move"
    assert {n: j["goal"] for n, j in episode.verdict["judgements"].items()} == {names[0]: 7, names[1]: 3}
    (request,) = judged  # one call rates every agent, having read the whole transcript
    assert all(f'{m.seat} said: "{m.text}"' in str(request["messages"]) for m in episode.moves)


def test_an_unscored_sotopia_episode_fails_rather_than_scoring_zero() -> None:
    scenario = shipped()[1]
    with FakeOpenAIServer(scripts={"EnvResponse": evaluation([11, 3])}) as server:  # 11: out of SOTOPIA's range
        env = SocialEnv([], [], max_turns=2, judge=make_chat_model(server.model_spec))
        episode = env.run_scenario(scenario, ChatSampler(server.base_url, "fake"))
        assert episode.failed is not None and "unscored" in episode.failed and not episode.rewards
        with pytest.raises(ValueError, match="scored by the judge"):
            SocialEnv([], []).run_scenario(scenario, ChatSampler(server.base_url, "fake"))


class _Replies:
    """A policy that answers every prompt with ``reply`` (a `Generation`, or anything a broken engine returns)."""

    def __init__(self, reply: Callable[[str], Any]) -> None:
        self.reply = reply

    def generate(self, prompt: str, prefill: str = "", stop: Stop = None,
                 max_tokens: int | None = None) -> Any:
        return self.reply(prompt)


def test_a_policy_that_returns_none_is_a_clear_error() -> None:
    env = SocialEnv(["negotiation"], [DECISION])
    with pytest.raises(PolicyReplyError, match="generate returned NoneType, not a Generation"):
        env.run(synthesize("negotiation", DECISION, 0), _Replies(lambda prompt: None))
    episode = env.run(synthesize("negotiation", "easy", 0), _Replies(lambda prompt: None))
    assert episode.failed is not None and "returned NoneType, not a Generation" in episode.failed


def test_a_runaway_reply_is_cut_and_the_move_says_so() -> None:
    huge = "I can offer $500 for the bike. " * 350_000  # 10 MB per move
    policy = _Replies(lambda prompt: reply_generation(prompt, huge))
    episode = SocialEnv(["negotiation"], ["easy"], max_turns=4).run(synthesize("negotiation", "easy", 0), policy)
    assert episode.failed is None and len(episode.moves) == 4
    assert all(len(m.text) <= MAX_REPLY_CHARS and m.reply_chars == len(huge) for m in episode.moves)
    assert all(len(m.prompt) < 8 * MAX_REPLY_CHARS for m in episode.moves), "later prompts hold the cut moves"


@pytest.mark.parametrize("level", [DECISION, TWO_TURN, "easy"])
def test_an_empty_reply_never_earns_a_reward(level: str) -> None:
    families = [f for f in decision_families() if f in ("negotiation", "secret", "scheduling", "persuasion",
                                                      "mutual_friend")]
    env = SocialEnv(families, [level])
    for task in env.tasks(range(6)):
        for reply in ("", " ", "\n"):
            episode = env.run(task, _Replies(lambda prompt, reply=reply: reply_generation(prompt, reply)))
            assert all(r <= 0 for r in episode.rewards.values()), (task.task_id, repr(reply), episode.rewards)


def _werewolf_task() -> Task:
    return SocialEnv(["werewolf"], ["easy"]).tasks([0])[0]


@pytest.mark.parametrize("cell", [DECISION, TWO_TURN, "easy", TWO_SEAT, "werewolf"])
@pytest.mark.parametrize(("tokens", "logprobs"), [([], []), ([5, 6], [-0.1])], ids=["no tokens", "mismatched"])
def test_a_reply_without_tokens_or_with_mismatched_log_probs_fails_every_cell(cell: str, tokens: list[int],
                                                                             logprobs: list[float]) -> None:
    """A reply that cannot be trained (no tokens, or not one log-prob per token) fails the episode in every cell, as
    self-play's rollouts fail it, and earns nothing: a decision scored a zero-token ACCEPT 1.0 before."""
    family = "mutual_friend" if cell == TWO_SEAT else "negotiation"
    task = _werewolf_task() if cell == "werewolf" else synthesize(family, cell, 0)
    env = SocialEnv([task.family], [task.level])
    policy = _Replies(lambda prompt: Generation(text="ACCEPT", prompt_ids=[1], token_ids=tokens, logprobs=logprobs))
    episode = env.run(task, policy)
    assert episode.failed is not None and f"a reply with {len(tokens)} tokens and {len(logprobs)} log-probs" \
        in episode.failed, (cell, episode.failed)
    assert not episode.rewards, episode.rewards
