"""An engine-neutral multi-seat environment: one policy in every seat, each seat's reward from swm's own code.

`SocialEnv` is the shape multi-agent RL engines share (verifiers' ``Env.run(task, agents)``, one
interaction per seat, rewards per seat): a task set and ``run(task, policy)``. The policy is swm's
`swm.selfplay.rollout.Sampler` (``generate(prompt) -> Generation``): swm's torch policy, its
llama.cpp-served sampler, or `ChatSampler` over any OpenAI-compatible server (vLLM, SGLang,
llama.cpp, an engine's inference server). What an episode is, is swm's, never restated here:

* a **decision** — the learner's one move on the decision's own prompt (`swm.tasks.decisions`);
* a **two-turn** task — the learner's first move, the code partner's reply (`swm.tasks.two_turn`), the
  learner's decision;
* an **episode** (``easy``/``medium``/``hard``) — every seat in turn with self-play's prompt until the
  checker finds the task settled (`swm.selfplay.rollout.play`);
* **Werewolf** — the game played to its end through swm's code moderator (`swm.games.play_game`), each
  seat seeing only its own perspective; the task's own deal (seats, seed, options).

Every seat's reward is swm self-play's (`swm.selfplay.rewards.score` on the task's code checker,
``score_game`` on the moderator's outcome). Given a ``judge`` model and ``reward.judge_weight > 0``, an
episode's turns are also scored by self-play's per-turn SOTOPIA-style judge (`swm.selfplay.judge`),
mixed in as self-play mixes it: the judge scores what code cannot, never completion. The `Episode`
carries the transcript in the form the checker reads (`swm.tasks.Utterance`), so
``check(task, episode.utterances)`` gives back ``episode.verdict``. An adapter to an engine maps its
client to a `Sampler` and ``Episode.rewards`` to its per-seat reward record; see docs/scaling.md.

What a policy returns is checked before swm reads it (`GuardedPolicy`): anything but a `Generation`
is a `PolicyReplyError` naming what came back, and a reply longer than `MAX_REPLY_CHARS` is cut there
(a runaway policy can send megabytes per move, which every later prompt would repeat); the move's
``reply_chars`` records the length it had.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any

from openai import OpenAI, omit
from pydantic import BaseModel, ConfigDict, Field

from swm.context import SWMContext
from swm.envs.grpo import move_text
from swm.games import Decision, Turn, get_game, play_game
from swm.lifelong.bridge import to_scenario
from swm.lifelong.game_bridge import game_to_record
from swm.nodes.judge import judge_all_agents
from swm.selfplay.game_rollout import SeatChats, parse_choice
from swm.selfplay.judge import judge_turns
from swm.selfplay.rewards import RewardConfig, score, score_game
from swm.selfplay.rollout import Sampler, generate, play, record_appends, seat_message, turn_prompt, unusable
from swm.social.models import Scenario
from swm.state import SocialStep
from swm.tasks import Task, Utterance, check, synthesize
from swm.tasks.decisions import Stop, before_stop, decision_prompt, stops
from swm.tasks.families import is_game, is_sampled
from swm.tasks.levels import play_of
from swm.tasks.two_turn import closing_prompt, opening_prompt, partner_reply, read_first_move
from swm.training.trajectory import Generation, Rollout, SeatTrajectory, SeatTurn
from swm.training.transcript import DEFAULT_TRANSCRIPT, SeatChat, Transcript, chat_prompt_ids, takes_chat

# a move is at most this many characters: the longest prompt-sized reply any task asks for is a few hundred
MAX_REPLY_CHARS = 4_000


class PolicyReplyError(TypeError):
    """A policy's ``generate`` returned something that is not a `Generation` (None, a string, a dict)."""


class GuardedPolicy:
    """A `Sampler` as an episode plays it: a reply that is not a `Generation` is a `PolicyReplyError`, a reply over
    `MAX_REPLY_CHARS` is cut there, and ``cut`` keeps each cut reply's full length by the prompt it answered."""

    def __init__(self, policy: Sampler) -> None:
        self.policy = policy
        self.cut: dict[str, int] = {}

    def generate(self, prompt: str, prefill: str = "", stop: Stop = None,
                 max_tokens: int | None = None) -> Generation:
        return self._checked(prompt, self.policy.generate(prompt, prefill=prefill, stop=stop, max_tokens=max_tokens))

    def _checked(self, prompt: str, gen: object) -> Generation:
        if not isinstance(gen, Generation):
            raise PolicyReplyError(f"the policy's generate returned {type(gen).__name__}, not a Generation "
                                   "(swm.training.trajectory.Generation: text, prompt_ids, token_ids, logprobs)")
        if len(gen.text) > MAX_REPLY_CHARS:
            self.cut[prompt] = len(gen.text)
            gen = gen.model_copy(update={"text": gen.text[:MAX_REPLY_CHARS]})
        return gen


class GuardedChatPolicy(GuardedPolicy):
    """A `GuardedPolicy` over a sampler that appends to a seat's chat (`takes_chat`): the chat is passed on."""

    def generate(self, prompt: str, prefill: str = "", stop: Stop = None,  # type: ignore[override]
                 max_tokens: int | None = None, chat: SeatChat | None = None) -> Generation:
        gen = generate(self.policy, prompt, chat, prefill=prefill, stop=stop, max_tokens=max_tokens)
        return self._checked(prompt, gen)


def _guard(policy: Sampler) -> GuardedPolicy:
    """Wrap one seat's policy, keeping whether it takes a seat's chat (append-only transcripts)."""
    return GuardedChatPolicy(policy) if takes_chat(policy) else GuardedPolicy(policy)


class Move(BaseModel):
    """One turn of an episode: who acted (a seat, or ``code`` for the two-turn partner), what it saw and said."""

    model_config = ConfigDict(extra="forbid")

    turn: int
    seat: str
    role: str
    prompt: str = Field("", description="the prompt the seat's policy was given ('' for a code partner)")
    text: str = Field(description="the reply as the checker reads it (a choice: the named target)")
    action_type: str = "speak"
    reward: float | None = Field(None, description="the turn's reward (None: a code partner's turn)")
    judge: float | None = Field(None, description="the judge's score of the turn in [0, 1], when judged")
    reply_chars: int | None = Field(None, description="the reply's length when it was cut at MAX_REPLY_CHARS "
                                    "(None: not cut)")


class SeatTrace(BaseModel):
    """One seat's episode as an RL engine trains on it: its whole sequence, its own tokens, its rewards.

    ``token_ids`` is the seat's transcript (its last prompt, then its last reply); ``spans`` the (start, end)
    positions of the tokens it generated, one per turn, with ``logprobs`` for them in order (NaN: unknown).
    With an append-only transcript (`swm.training.transcript`; ``appended == append_checked``) every turn's
    prompt is a prefix of it; otherwise ``token_ids`` holds the last turn only and ``spans`` only its reply.
    ``states`` is the social state after each of its turns (a game's step, a task's verdict so far).
    """

    model_config = ConfigDict(extra="forbid")

    seat: str
    role: str
    trainable: bool = Field(description="played by the policy (False: a code partner's or a fixed seat's)")
    token_ids: list[int] = Field(default_factory=list)
    spans: list[tuple[int, int]] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    turns: list[int] = Field(default_factory=list, description="the episode turn of each of its moves")
    rewards: list[float] = Field(default_factory=list, description="each of its turns' reward")
    reward: float = Field(0.0, description="its episode reward (the sum of its turns', or its outcome)")
    states: list[dict[str, Any] | None] = Field(default_factory=list)
    appended: int = 0
    append_checked: int = 0


def seat_trace(seat: SeatTrajectory, reward: float, trainable: bool = True) -> SeatTrace:
    """A seat's trajectory as a `SeatTrace` (one sequence when its turns append, else its last turn)."""
    turns = seat.turns
    whole = bool(turns) and seat.appended == seat.append_checked == len(turns) - 1 and bool(turns[-1].prompt_ids)
    shown = turns if whole else turns[-1:]
    last = turns[-1] if turns else None
    return SeatTrace(seat=seat.seat, role=seat.role, trainable=trainable,
                     token_ids=[*last.prompt_ids, *last.token_ids] if last else [],
                     spans=[(len(t.prompt_ids), len(t.prompt_ids) + len(t.token_ids)) for t in shown if t.token_ids],
                     logprobs=[x for t in shown for x in t.logprobs], turns=[t.turn for t in turns],
                     rewards=[t.reward for t in turns], reward=reward, states=[t.state for t in turns],
                     appended=seat.appended, append_checked=seat.append_checked)


class Episode(BaseModel):
    """A finished episode: the moves, each seat's reward (the sum of its turns'), the checker's verdict.

    ``traces`` holds each seat's `SeatTrace`: the sequence an RL engine trains that seat on.
    """

    model_config = ConfigDict(extra="forbid")

    task_id: str
    family: str
    level: str
    moves: list[Move] = Field(default_factory=list)
    rewards: dict[str, float] = Field(default_factory=dict)
    verdict: dict[str, Any] = Field(default_factory=dict)
    failed: str | None = None
    traces: list[SeatTrace] = Field(default_factory=list)

    @property
    def utterances(self) -> list[Utterance]:
        """The transcript as swm's checkers read it."""
        return [Utterance(agent=m.seat, text=m.text, action_type=m.action_type) for m in self.moves]


class SocialEnv:
    """swm's verifiable tasks and Werewolf as a multi-seat environment (see the module docstring)."""

    def __init__(self, families: Sequence[str], levels: Sequence[str], *, reward: RewardConfig | None = None,
                 max_turns: int = 8, judge: Any = None, transcript: Transcript = DEFAULT_TRANSCRIPT) -> None:
        self.transcript = transcript  # each seat's context: one chat that only grows, or re-rendered (rerender)
        self.families = tuple(families)
        self.levels = tuple(levels)
        self.reward = reward or RewardConfig()
        self.max_turns = max_turns
        self.judge = judge  # a chat model (swm.llm.make_chat_model) for the per-turn judge of episodes

    def tasks(self, seeds: Iterable[int], split: str = "train") -> list[Task]:
        """The task set: every (family, level, seed), generated by swm's generator."""
        seeds = list(seeds)
        return [synthesize(f, lv, s, split) for f in self.families for lv in self.levels for s in seeds]

    def seats(self, task: Task | Scenario) -> list[str]:
        """The seats a policy plays in ``task``: the learner of a decision or two-turn task (its partner is code),
        every seat of an episode or a SOTOPIA scenario, every player of a game."""
        if isinstance(task, Scenario):
            return list(task.names)
        if is_game(task.family):
            return [str(p) for p in task.truth["players"]]
        if is_sampled(task.level):  # a learner against code
            return [str(task.truth["learner"])]
        return list(to_scenario(task).names)

    def run(self, task: Task, policy: Sampler | Mapping[str, Sampler], *, sample: int = 0) -> Episode:
        """Play ``task`` with ``policy`` in every seat; return the episode with per-seat rewards and the verdict.

        ``policy`` is one `Sampler` for every seat, or one per seat of `seats` (an engine's agent per seat).
        """
        guarded, cut = _guarded(policy)
        return _mark_cut(self._run(task, guarded, sample), cut)

    def _run(self, task: Task, policy: Sampler | Mapping[str, Sampler], sample: int) -> Episode:
        if is_game(task.family):
            return self._game(task, policy)
        if play_of(task.level) == "decision":
            return self._decision(task, _seat(policy, str(task.truth["learner"])))
        if play_of(task.level) == "two-turn":
            return self._two_turn(task, _seat(policy, str(task.truth["learner"])))
        rollout = play(task, policy, rollout_id=f"{task.task_id}/{sample}", iteration=0, sample=sample,
                       max_turns=self.max_turns, transcript=self.transcript)
        if rollout.failed:
            return Episode(task_id=task.task_id, family=task.family, level=task.level, failed=rollout.failed)
        judged = None
        if self.judge is not None and self.reward.judge_weight > 0:
            judged, _ = judge_turns(self.judge, rollout, task)
        return self._scored(task, rollout, {}, judged)

    def run_scenario(self, scenario: Scenario, policy: Sampler | Mapping[str, Sampler]) -> Episode:
        """Play a SOTOPIA scenario for ``max_turns`` turns and score it with SOTOPIA's own evaluator.

        Every seat speaks in turn with self-play's prompt (`swm.selfplay.rollout.turn_prompt`: its own
        background and goal, everything said so far); then the judge model rates every seat in one call
        on SOTOPIA-EVAL's dimensions (`swm.nodes.judge.judge_all_agents`, as ``swm bench sotopia``
        judges), and a seat's reward is its goal score / 10. An episode the judge leaves unscored fails:
        no reward is made up. The verdict holds each seat's judgement.
        """
        if self.judge is None:
            raise ValueError("a SOTOPIA scenario is scored by the judge: give SocialEnv a judge model")
        guarded, cut = _guarded(policy)
        return _mark_cut(self._scenario(scenario, guarded), cut)

    def _scenario(self, scenario: Scenario, policy: Sampler | Mapping[str, Sampler]) -> Episode:
        assert self.judge is not None
        names = list(scenario.names)
        said: list[tuple[str, str]] = []
        moves: list[Move] = []
        seats = {n: SeatTrajectory(seat=n, role=f"agent_{names.index(n) + 1}") for n in names}
        chats: dict[str, SeatChat] = {}
        failed = None
        for turn in range(self.max_turns):
            speaker = names[turn % len(names)]
            sampler = _seat(policy, speaker)
            chat = chats.setdefault(speaker, SeatChat()) if self.transcript == "append" and takes_chat(sampler) \
                else None
            prompt = seat_message(scenario, speaker, said, turn, chat) if chat is not None else \
                turn_prompt(scenario, speaker, said, turn)
            try:
                gen = generate(sampler, prompt, chat)
            except Exception as err:  # noqa: BLE001 - a model error fails the episode, with its reason
                failed = f"turn {turn}: {type(err).__name__}: {err}"[:500]
                break
            text = gen.text.strip()
            if chat is not None:
                chat.extend(prompt, gen.text, gen.prompt_ids, gen.token_ids)
            seats[speaker].turns.append(SeatTurn(turn=turn, prompt=prompt, text=text, prompt_ids=gen.prompt_ids,
                                                 token_ids=gen.token_ids, logprobs=gen.logprobs))
            moves.append(Move(turn=turn, seat=speaker, role=seats[speaker].role, prompt=prompt, text=text))
            said.append((speaker, text))
        head = {"task_id": scenario.id, "family": "sotopia", "level": scenario.codename or "scenario"}
        if failed:
            return Episode(**head, moves=moves, failed=failed)
        steps = [SocialStep(timestep=str(m.turn), actions={m.seat: f'{m.seat} said: "{m.text}"'}) for m in moves]
        judged, _, _ = judge_all_agents(SWMContext(chat_models={"judge": self.judge}), scenario, steps)
        goals = {name: judged[name].goal for name in names}
        if any(g is None for g in goals.values()):
            return Episode(**head, moves=moves, failed=f"unscored by the judge: {judged[names[0]].error}"[:500])
        rewards = {name: float(goal) / 10.0 for name, goal in goals.items() if goal is not None}
        last = {m.seat: m.turn for m in moves}
        for m in moves:  # the seat's reward at its last move, as self-play rewards a game's outcome
            m.reward = rewards[m.seat] if last[m.seat] == m.turn else 0.0
        for seat in seats.values():
            for t in seat.turns:
                t.reward = rewards[seat.seat] if last[seat.seat] == t.turn else 0.0
        record_appends(seats.values())
        return Episode(**head, moves=moves, rewards=rewards,
                       verdict={"judgements": {n: judged[n].model_dump() for n in names}},
                       traces=[seat_trace(s, rewards[s.seat]) for s in seats.values()])

    # ---- the shapes -----------------------------------------------------------------------------------
    def _scored(self, task: Task, rollout: Rollout, code_turns: dict[int, Move],
                judged: dict[int, float] | None = None) -> Episode:
        """Score a rollout with swm's rewards (and judge scores); ``code_turns``: the code partner's moves by turn."""
        _, verdict = score(rollout, task, self.reward, judged)
        return self._episode(task, rollout, code_turns, verdict.model_dump())

    def _episode(self, task: Task, rollout: Rollout, code_turns: dict[int, Move], verdict: dict[str, Any],
                 texts: dict[int, tuple[str, str]] | None = None) -> Episode:
        moves = dict(code_turns)
        for seat in rollout.seats:
            for t in seat.turns:
                text, kind = (texts or {}).get(t.turn, (t.text, "speak"))
                moves[t.turn] = Move(turn=t.turn, seat=seat.seat, role=seat.role, prompt=t.prompt, text=text,
                                     action_type=kind, reward=t.reward, judge=t.judge)
        # a seat's reward is the sum of its turns' (its outcome, and a game's illegal-move penalties); a seat
        # that never acted (settled, or killed, before its turn) keeps its outcome
        rewards = {s.seat: sum(t.reward for t in s.turns) if s.turns else s.outcome for s in rollout.seats}
        traces = [seat_trace(s, rewards[s.seat]) for s in rollout.seats]
        traces += [SeatTrace(seat=m.seat, role=m.role, trainable=False, turns=[m.turn], states=[None])
                   for m in code_turns.values()]
        return Episode(task_id=task.task_id, family=task.family, level=task.level,
                       moves=[moves[k] for k in sorted(moves)], rewards=rewards, verdict=verdict, traces=traces)

    def _decision(self, task: Task, policy: Sampler) -> Episode:
        shown = decision_prompt(task)
        learner = str(task.truth["learner"])
        gen = policy.generate(shown.text)
        if (why := unusable(gen)) is not None:  # failed as an episode's unusable reply fails it (`play`)
            return Episode(task_id=task.task_id, family=task.family, level=task.level, failed=f"turn 0: {why}")
        rollout = _one_seat(task, learner, [(shown.text, move_text(shown.prefill, gen.text), gen)])
        return self._scored(task, rollout, {})

    def _two_turn(self, task: Task, policy: Sampler) -> Episode:
        learner, partner = str(task.truth["learner"]), str(task.truth["partner"])
        opening = opening_prompt(task)
        first = policy.generate(opening.text)
        if (why := unusable(first)) is not None:
            return Episode(task_id=task.task_id, family=task.family, level=task.level, failed=f"turn 0: {why}")
        first_move = move_text(opening.prefill, first.text)
        read = read_first_move(task, first_move)
        closing = closing_prompt(task, read)
        second = policy.generate(closing.text)
        if (why := unusable(second)) is not None:
            return Episode(task_id=task.task_id, family=task.family, level=task.level, failed=f"turn 2: {why}")
        # the code partner's reply is turn 1 of the transcript; the learner's seat holds turns 0 and 2
        rollout = _one_seat(task, learner, [(opening.text, first_move, first),
                                            (closing.text, move_text(closing.prefill, second.text), second)],
                            turns=[0, 2])
        reply = Move(turn=1, seat=partner, role=task.agent(partner).role, text=partner_reply(task, read))
        verdict = check(task, [Utterance(agent=learner, text=first_move), Utterance(agent=partner, text=reply.text),
                               Utterance(agent=learner, text=rollout.seats[0].turns[1].text)])
        _score_turns(rollout, task, self.reward, verdict.model_dump())
        return self._episode(task, rollout, {1: reply}, verdict.model_dump())

    def _game(self, task: Task, policy: Sampler | Mapping[str, Sampler]) -> Episode:
        truth = task.truth
        seen: dict[int, tuple[str, Generation]] = {}
        chats = SeatChats(self.transcript)

        def decide(turn: Turn) -> Decision:
            prompt, gen = chats.move(_seat(policy, turn.request.agent), turn)
            if (why := unusable(gen)) is not None:
                raise ValueError(f"turn {turn.index}: {why}")
            seen[turn.index] = (prompt, gen)
            text = gen.text.strip()
            if turn.request.kind == "speak":
                return Decision(text=text, policy="env")
            target = parse_choice(text, turn.request.options, turn.request.allow_abstain)
            return Decision(target=target, text=text if turn.request.with_message else "", policy="env")

        try:
            record = play_game(get_game(truth["game"]), decide, seed=int(truth["deal_seed"]),
                               players=list(truth["players"]), options=dict(truth.get("options") or {}),
                               game_id=task.task_id)
        except Exception as err:  # noqa: BLE001 - a model or game error fails the episode, with its reason
            return Episode(task_id=task.task_id, family=task.family, level=task.level,
                           failed=f"{type(err).__name__}: {err}"[:500])
        checked = game_to_record(task, record, episode_id=task.task_id)
        seats = {p: SeatTrajectory(seat=p, role=record.roles[p]) for p in record.players}
        texts: dict[int, tuple[str, str]] = {}
        for i, (move, acted) in enumerate(zip(record.moves, checked.turns, strict=True)):
            prompt, gen = seen.get(move.turn, (move.prompt, None))
            seats[move.agent].turns.append(SeatTurn(turn=i, prompt=prompt, text=gen.text.strip() if gen else acted.text,
                                                    prompt_ids=gen.prompt_ids if gen else [],
                                                    token_ids=gen.token_ids if gen else [],
                                                    logprobs=gen.logprobs if gen else [],
                                                    state=json.loads(move.step) if move.step else None))
            texts[i] = (acted.text, acted.action_type)
        outcome = record.outcome
        broken = [i for i, m in enumerate(record.moves) if m.violation]
        rollout = Rollout(rollout_id=task.task_id, task_id=task.task_id, iteration=0, sample=0,
                          seats=list(seats.values()),
                          verdict={"winner": outcome.winner if outcome else None,
                                   "rewards": outcome.rewards() if outcome else {}, "violation_turns": broken})
        record_appends(rollout.seats)
        score_game(rollout, self.reward)
        return self._episode(task, rollout, {}, checked.verdict.model_dump(), texts)


def _guarded(policy: Sampler | Mapping[str, Sampler]) -> tuple[Sampler | Mapping[str, Sampler], dict[str, int]]:
    """The policy (or each seat's) behind a `GuardedPolicy`, and the one record of cut replies they share."""
    cut: dict[str, int] = {}
    guards = {seat: _guard(p) for seat, p in policy.items()} if isinstance(policy, Mapping) \
        else {"": _guard(policy)}
    for guard in guards.values():
        guard.cut = cut
    return (guards if isinstance(policy, Mapping) else guards[""]), cut


def _mark_cut(episode: Episode, cut: dict[str, int]) -> Episode:
    """Record on each move whose reply was cut the length it had."""
    for move in episode.moves:
        move.reply_chars = cut.get(move.prompt) if move.prompt else None
    return episode


def _seat(policy: Sampler | Mapping[str, Sampler], seat: str) -> Sampler:
    """The sampler that plays ``seat``: the one policy, or the seat's own."""
    return policy[seat] if isinstance(policy, Mapping) else policy


def _one_seat(task: Task, seat: str, played: list[tuple[str, str, Generation]],
              turns: list[int] | None = None) -> Rollout:
    """A rollout with the learner's seat only: its prompts, moves (as read) and generations."""
    numbers = turns or list(range(len(played)))
    seat_turns = [SeatTurn(turn=n, prompt=prompt, text=text, prompt_ids=gen.prompt_ids, token_ids=gen.token_ids,
                           logprobs=gen.logprobs) for n, (prompt, text, gen) in zip(numbers, played, strict=True)]
    return Rollout(rollout_id=task.task_id, task_id=task.task_id, iteration=0, sample=0,
                   seats=[SeatTrajectory(seat=seat, role=task.agent(seat).role, turns=seat_turns)])


def _score_turns(rollout: Rollout, task: Task, config: RewardConfig, verdict: dict[str, Any]) -> None:
    """Score a two-turn rollout: `score` on the learner's own turns renumbered 0, 1 (the partner is code)."""
    seat = rollout.seats[0]
    numbers = [t.turn for t in seat.turns]
    for k, t in enumerate(seat.turns):
        t.turn = k
    score(rollout, task, config)
    for t, n in zip(seat.turns, numbers, strict=True):
        t.turn = n


class ChatSampler:
    """A `Sampler` over an OpenAI-compatible chat endpoint: one user message per turn, the reply's text.

    Token ids and log-probabilities come from the server when it returns them (``logprobs``; vLLM
    with ``return_tokens_as_token_ids`` gives ``token_id:N`` tokens), else the ids come from
    ``tokenizer`` (the text re-tokenised, as swm's served sampler does) and each log-probability is
    NaN: unknown. With neither, a reply records one placeholder id 0 (the rollout loop wants at least one
    token per turn). Engines recompute tokens and log-probabilities under their own trainer; swm's PPO
    never trains on a `ChatSampler` rollout.
    """

    def __init__(self, base_url: str, model: str, *, tokenizer: Any = None, api_key: str = "sk-no-key-needed",
                 temperature: float = 1.0, max_tokens: int = 64, timeout: float = 120.0) -> None:
        self.client = OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=2)
        self.model, self.tokenizer = model, tokenizer
        self.temperature, self.max_tokens = temperature, max_tokens

    def generate(self, prompt: str, prefill: str = "", stop: Stop = None,
                 max_tokens: int | None = None, chat: SeatChat | None = None) -> Generation:
        """One reply to ``prompt``; its text is the move as swm reads it (``prefill`` first: `reply_generation`).

        With the seat's ``chat``, ``prompt`` is its next message after the chat's (an append-only transcript: the
        server's prefix cache serves the rest); the prompt ids are then the chat's, extended (`chat_prompt_ids`).
        """
        messages = chat.with_user(prompt) if chat is not None else [{"role": "user", "content": prompt}]
        reply = self.client.chat.completions.create(model=self.model, messages=messages,  # type: ignore[arg-type]
                                                    temperature=self.temperature,
                                                    max_tokens=max_tokens or self.max_tokens, logprobs=True,
                                                    stop=list(stops(stop)) or omit)
        choice = reply.choices[0]
        text = choice.message.content or ""
        content = (choice.logprobs.content or []) if choice.logprobs is not None else []
        ids = [_token_id(c.token) for c in content]
        prompt_ids = chat_prompt_ids(self.tokenizer, chat, prompt) if chat is not None and self.tokenizer is not None \
            else _ids(self.tokenizer, prompt)
        if content and all(i is not None for i in ids):
            return Generation(text=move_text(prefill, text), prompt_ids=prompt_ids,
                              token_ids=[int(i) for i in ids if i is not None],
                              logprobs=[float(c.logprob) for c in content])
        return reply_generation(prompt, text, prefill, stop, self.tokenizer).model_copy(
            update={"prompt_ids": prompt_ids})


def reply_generation(prompt: str, reply: str, prefill: str = "", stop: Stop = None,
                     tokenizer: object = None) -> Generation:
    """A chat reply as a `Generation`: the move as swm reads it (``prefill`` first, cut at the first of ``stop``'s
    strings in it), token ids from ``tokenizer`` (else one placeholder id 0) and unknown (NaN) log-probabilities."""
    reply = before_stop(reply, stop)
    # a runaway reply (megabytes) is not tokenised whole; `GuardedPolicy` cuts its text and records that it did
    tokens = _ids(tokenizer, reply[:MAX_REPLY_CHARS]) or [0]
    return Generation(text=move_text(prefill, reply), prompt_ids=_ids(tokenizer, prompt), token_ids=tokens,
                      logprobs=[math.nan] * len(tokens))


def _ids(tokenizer: Any, text: str) -> list[int]:
    if tokenizer is None:
        return []
    return [int(i) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]


class AsyncSeat:
    """A `Sampler` over one seat of an async engine: ``turn(prompt)`` (a coroutine giving the seat's reply) run on the
    engine's event loop from the thread `run_async` plays in. Token ids and log-probabilities stay the engine's own
    (it records them with its trace); the `Generation` holds the reply as swm reads it."""

    def __init__(self, turn: Callable[[str], Coroutine[Any, Any, str]], loop: asyncio.AbstractEventLoop,
                 tokenizer: Any = None) -> None:
        self.turn, self.loop, self.tokenizer = turn, loop, tokenizer

    def generate(self, prompt: str, prefill: str = "", stop: Stop = None,
                 max_tokens: int | None = None) -> Generation:
        reply = asyncio.run_coroutine_threadsafe(self.turn(prompt), self.loop).result()
        return reply_generation(prompt, reply, prefill, stop, self.tokenizer)


async def run_async(env: SocialEnv, task: Task | Scenario,
                    turns: Mapping[str, Callable[[str], Coroutine[Any, Any, str]]], *, sample: int = 0,
                    tokenizer: object = None) -> Episode:
    """Play ``task`` (or a SOTOPIA scenario) with each seat's async ``turn`` (by seat, every one of ``env.seats``).

    For engines whose agents are coroutines (verifiers' interactions): swm's episode runs in a worker thread and
    each seat's move is awaited on this event loop, so the engine's own clients, traces and limits apply.
    """
    missing = set(env.seats(task)) - set(turns)
    if missing:
        where = task.id if isinstance(task, Scenario) else task.task_id
        raise ValueError(f"no turn for seats {sorted(missing)} of {where}")
    loop = asyncio.get_running_loop()
    seats = {seat: AsyncSeat(turn, loop, tokenizer) for seat, turn in turns.items()}
    if isinstance(task, Scenario):
        return await asyncio.to_thread(env.run_scenario, task, seats)
    return await asyncio.to_thread(env.run, task, seats, sample=sample)


def _token_id(token: str) -> int | None:
    """The id in a vLLM ``token_id:N`` token string, else None."""
    head, _, tail = token.partition(":")
    return int(tail) if head == "token_id" and tail.isdigit() else None
