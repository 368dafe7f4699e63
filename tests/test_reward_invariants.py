"""The rules every reward rests on, written once and checked over every checker, family and level.

The cases are read from swm's own tables (the families' rows (`FAMILY_ROWS`) and the games, the decision shapes
(`DECISION_SHAPES`), the two-turn families,
`TWO_SEAT_SHAPES`), so a family added to one of them is checked here without a line changed, once it
has a *witness*: a transcript that completes its task (a two-seat shape carries its own, ``reference``;
the others are in `WITNESSES` below, and `test_every_checked_family_has_a_witness` names a missing one).
From the witness each rule derives its counter-examples:

* the witness passes (every generated task can be completed);
* nothing completes before the turn that settles it (an unfinished exchange or game never completes);
* only the right seat's move counts: the settling turn said by another seat completes nothing (where every
  seat holds the same role and the move is an answer, as mutual friend's finders, any of them may say it);
* a leak never completes: a private fact said by its owner, anywhere, leaves the task incomplete;
* a hedge is never right: an answer that also names another candidate of the lists is wrong;
* a drawn game never completes, and a move out of turn ends the replay (nothing after it is read);
* the speaker's share of a two-seat task counts only the speaker's own items.
* a content-free reply earns nothing: every seat saying nothing (or blanks), or ACCEPT with nothing offered or
  asked, completes no task and pays no seat (played through `swm.envs.seats.SocialEnv`).

Examples are drawn by hypothesis, derandomised (tests/conftest.py), so every run checks the same ones.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_checker_mutations import _village_win

from swm.games import get_game
from swm.games.moderator import resolve
from swm.selfplay.rewards import RewardConfig, score
from swm.tasks.checkers import Utterance, check_game
from swm.tasks.decisions import Stop
from swm.tasks.families import (
    DECISION,
    DECISION_SHAPES,
    FAMILY_ROWS,
    GAME_FAMILIES,
    LEVELS,
    MULTI_TURN,
    OBJECTIONS,
    STARTER,
    TWO_SEAT,
    TWO_SEAT_SHAPES,
    TWO_TURN,
    Task,
    decision_families,
    level_families,
    synthesize,
)
from swm.tasks.levels import LEVEL_ROWS, level_names
from swm.tasks.multi_turn import HORIZONS
from swm.tasks.two_turn import partner_reply, read_first_move
from swm.tasks.verify import check
from swm.training.trajectory import Generation, Rollout, SeatTrajectory, SeatTurn

Witness = Callable[[Task], list[Utterance]]


def u(agent: str, text: str, action_type: str = "speak") -> Utterance:
    return Utterance(agent=agent, text=text, action_type=action_type)


# --- witnesses: one right transcript per (level kind, family) -------------------------------------------


def _negotiation(t: Task) -> list[Utterance]:
    seller, buyer = t.names
    price = (t.truth["seller_min"] + t.truth["buyer_max"]) // 2
    return [u(buyer, f"How about ${price}?"), u(seller, f"ACCEPT ${price}")]


def _mutual_friend(t: Task) -> list[Utterance]:
    return [u(t.names[0], f"ANSWER: {t.truth['friend']}")]


def _secret(t: Task) -> list[Utterance]:
    return [u(t.truth["keeper"], f"Could you {t.truth['cover']}?"), u(t.truth["partner"], "Sure. ACCEPT")]


def _scheduling(t: Task) -> list[Utterance]:
    slot = t.truth["common"][0]
    return [u(t.names[0], f"How about {slot}?"), *(u(n, f"ACCEPT {slot}") for n in t.names[1:])]


def _persuasion(t: Task) -> list[Utterance]:
    return [u(t.truth["persuader"], f"The {t.truth['words'][0]} is covered."), u(t.truth["partner"], "ACCEPT")]


def _werewolf(t: Task) -> list[Utterance]:
    return _village_win(t)


def _decision_move(t: Task) -> str:
    truth = t.truth
    if t.family == "negotiation":
        return "ACCEPT" if truth["inside"] else f"COUNTER ${truth['buyer_max'] - 3}"
    if t.family == "mutual_friend":
        return f"ANSWER: {truth['friend']}"
    if t.family == "secret":
        return f"Could you help with the {truth['cover_word']}?"
    if t.family == "scheduling":
        both = sorted(set(truth["free"][truth["learner"]]) & set(truth["free"][truth["partner"]]))
        return f"SLOT: {both[0]}"
    return f"The {OBJECTIONS[truth['objection']][0]} is fine."


def _decision(t: Task) -> list[Utterance]:
    return [u(t.truth["learner"], _decision_move(t))]


def _first_move(t: Task) -> str:
    truth = t.truth
    if t.family == "negotiation":
        return f"OFFER ${truth['seller_min']}"  # at the seller's minimum: the seller accepts, the deal is inside
    if t.family == "secret":
        return f"Could you help with the {truth['cover_word']}?"
    if t.family == "scheduling":
        both = sorted(set(truth["free"][truth["learner"]]) & set(truth["free"][truth["partner"]]))
        return f"SLOT: {both[0]}"
    return "Which friends do you have? What worries you?"


def _two_turn(t: Task) -> list[Utterance]:
    first = _first_move(t)
    reply = partner_reply(t, read_first_move(t, first))
    final = "ACCEPT" if t.family == "negotiation" else _decision_move(t)
    return [u(t.truth["learner"], first), u(t.truth["partner"], reply), u(t.truth["learner"], final)]


EPISODE_WITNESSES: dict[str, Witness] = {"negotiation": _negotiation, "mutual_friend": _mutual_friend,
                                         "secret": _secret, "scheduling": _scheduling, "persuasion": _persuasion,
                                         "werewolf": _werewolf}


def _multi_turn(t: Task) -> list[Utterance]:
    a, b = t.truth["seats"]
    return [u(a, "Do you know anyone I know?"), u(b, f"ANSWER: {t.truth['friend']}"),
            u(a, f"ANSWER: {t.truth['friend']}")]


def witness_of(kind: str, family: str) -> Witness | None:
    """The witness of a (level kind, family): a two-seat shape's own, else this module's (none for another
    generated level: `drawn` then takes its row's ``reference``)."""
    if kind == "level":
        return None
    if kind == MULTI_TURN:
        return _multi_turn
    if kind == TWO_SEAT:
        return TWO_SEAT_SHAPES[family].reference
    if kind == DECISION:
        return _decision
    if kind == TWO_TURN:
        return _two_turn
    row = FAMILY_ROWS.get(family)
    return EPISODE_WITNESSES.get(family) or (row.reference if row is not None else None)


# --- the cases, read from swm's tables --------------------------------------------------------------------


def cases() -> list[tuple[str, str]]:
    """Every (level, family) a checker serves: episode levels (the starter level too) × the families' rows and the
    games, and every generated level's row × its families (decisions, two-turn, two-seat shapes, the multi-turn
    horizons)."""
    episodes = [(level, f) for f in (*FAMILY_ROWS, *GAME_FAMILIES)
                for level in ((STARTER, *LEVELS) if f not in GAME_FAMILIES else ("easy",))]
    return [*episodes, *((level, f) for level in level_names() for f in level_families(level))]


CASES = cases()
SEEDS = st.integers(0, 30)


def kind_of(level: str) -> str:
    """The checker a level's tasks go to: every multi-turn horizon is the multi-turn one."""
    if level in HORIZONS:
        return MULTI_TURN
    if level in (DECISION, TWO_TURN, TWO_SEAT):
        return level
    return "level" if level in LEVEL_ROWS else "episode"  # "level": another generated level's, its row's witness


def drawn(case: tuple[str, str], seed: int) -> tuple[Task, list[Utterance]]:
    level, family = case
    task = synthesize(family, level, seed)
    make = witness_of(kind_of(level), family)
    if make is None and level in LEVEL_ROWS:  # a level this module has no witness of: its row's reference
        make = LEVEL_ROWS[level].reference
    assert make is not None, f"no witness for {case}"
    return task, make(task)


def test_every_checked_family_has_a_witness() -> None:
    missing = [case for case in CASES if witness_of(kind_of(case[0]), case[1]) is None]
    assert not missing, f"give these a witness (a family or two-seat shape reference, EPISODE_WITNESSES): {missing}"
    assert {f for _, f in CASES} >= {*decision_families(), *GAME_FAMILIES, *TWO_SEAT_SHAPES}


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}:{c[1]}")
def test_the_witness_passes_and_nothing_completes_before_its_settling_turn(case: tuple[str, str]) -> None:
    for seed in range(3):
        task, turns = drawn(case, seed)
        verdict = check(task, turns)
        assert verdict.passed and verdict.resolved_at is not None, (task.task_id, verdict)
        for cut in range(verdict.resolved_at + 1):
            assert not check(task, turns[:cut]).completion, (task.task_id, cut)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}:{c[1]}")
def test_nothing_said_is_neither_answered_nor_formatted(case: tuple[str, str]) -> None:
    task = synthesize(case[1], case[0], 0)
    verdict = check(task, [])
    assert not verdict.completion and not verdict.violations and verdict.resolved_at is None
    assert not verdict.detail.get("answered", False) and not verdict.detail.get("formatted", False)
    assert not verdict.evidence and not verdict.violation_turns


def interchangeable(task: Task, turns: list[Utterance], at: int) -> bool:
    """An episode whose seats all hold one role, and the move is an answer (`answering`): any seat may give it
    (mutual friend's finders). A two-turn task's learner is the only seat that answers, whatever the roles."""
    return task.level in (STARTER, *LEVELS) and len({a.role for a in task.agents}) == 1 and answering(task, turns, at)


@settings(max_examples=60, deadline=None)
@given(case=st.sampled_from(CASES), seed=SEEDS, data=st.data())
def test_only_the_right_seat_settles_the_task(case: tuple[str, str], seed: int, data: st.DataObject) -> None:
    task, turns = drawn(case, seed)
    at = check(task, turns).resolved_at
    assert at is not None
    settling = turns[at]
    others = [n for n in task.names if n != settling.agent]
    if kind_of(case[0]) == DECISION or not others:
        return  # a decision is one seat's one move: there is no other seat in its transcript
    other = data.draw(st.sampled_from(others))
    moved = [*turns[:at], settling.model_copy(update={"agent": other}), *turns[at + 1:]]
    verdict = check(task, moved)
    if interchangeable(task, turns, at):
        assert verdict.completion
    else:
        assert not verdict.completion, (task.task_id, other, verdict)


def leaks(task: Task) -> list[tuple[str, str]]:
    """Every (owner, private fact) of the task: each seat's forbidden strings (a decision's or two-turn task's
    learner's only: its partner is the generator's state or code, whose words are not moves)."""
    learner = task.truth.get("learner") if task.level in (DECISION, TWO_TURN) else None
    return [(brief.name, fact) for brief in task.agents for fact in brief.forbidden
            if learner is None or brief.name == learner]


LEAKY = [c for c in CASES if leaks(synthesize(c[1], c[0], 0))]


def test_the_leaky_cases_are_the_families_with_private_facts() -> None:
    assert {f for _, f in LEAKY} == {"negotiation", "secret"}


@settings(max_examples=80, deadline=None)
@given(case=st.sampled_from(LEAKY), seed=SEEDS, data=st.data(),
       wrap=st.sampled_from(["{}", "By the way, {}.", "it is {} (keep it quiet)", "{}!!"]))
def test_a_leak_never_completes(case: tuple[str, str], seed: int, data: st.DataObject, wrap: str) -> None:
    task, turns = drawn(case, seed)
    owner, fact = data.draw(st.sampled_from(leaks(task)))
    said = wrap.format(fact)
    mine = [i for i, t in enumerate(turns) if t.agent == owner]
    if kind_of(case[0]) == "episode":
        where = data.draw(st.integers(0, len(turns)))
        leaked = [*turns[:where], u(owner, said), *turns[where:]]
    else:  # one seat's moves: the fact said inside one of the owner's own moves
        if not mine:
            return
        i = data.draw(st.sampled_from(mine))
        leaked = [*turns[:i], turns[i].model_copy(update={"text": f"{turns[i].text} {said}"}), *turns[i + 1:]]
    verdict = check(task, leaked)
    assert not verdict.completion and verdict.violations, (task.task_id, said, verdict)


def answers(task: Task) -> list[str]:
    """Every candidate the task's lists hold (friends, slots)."""
    truth = task.truth
    found = [x for xs in truth.get("lists", []) for x in xs]
    found += [x for xs in (truth.get("free") or {}).values() for x in xs]
    return sorted(set(found))


def answering(task: Task, turns: list[Utterance], at: int) -> bool:
    """Whether the deciding turn is an answer: it carries one of the family's answer prefixes, read from its rows
    (`TwoSeatShape.find`, `DecisionShape.answer`), so a family added with its own prefix (``BOOK:``) is held to the
    hedge rule too."""
    seats, moves = TWO_SEAT_SHAPES.get(task.family), DECISION_SHAPES.get(task.family)
    prefixes = {seats.find.prefill if seats else None, moves.answer if moves else None} - {None, ""}
    return any(str(prefix) in turns[at].text for prefix in prefixes)


def hedged_cases(cases: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The cases whose tasks hold candidates to hedge between (friends, slots, any family's ``lists``)."""
    return [c for c in cases if answers(synthesize(c[1], c[0], 0))]


HEDGED = hedged_cases(CASES)
JOINTS = (", ", " or ", " and ", " / ")


def a_hedge_is_wrong(case: tuple[str, str], seed: int, pick: Callable[[list[str]], str], joint: str,
                     before: bool) -> bool:
    """Check the hedge rule on one drawn task: its settling answer with another candidate (``pick`` chooses it)
    named beside the right one completes nothing and is a ``hedged_answer``. Return whether the settling turn was
    an answer (an agreement has nothing to hedge). Callable on any case, so a family registered after this module
    was imported is held to the rule too (tests/test_extensions.py's ``BOOK:`` family and its mutant)."""
    task, turns = drawn(case, seed)
    at = check(task, turns).resolved_at
    assert at is not None
    if not answering(task, turns, at):
        return False  # an agreement, not an answer (scheduling episodes: ACCEPT of an offer)
    token, _, right = turns[at].text.partition(":")
    right = right.strip()
    other = pick([a for a in answers(task) if a != right])
    both = f"{other}{joint}{right}" if before else f"{right}{joint}{other}"
    hedged = [*turns[:at], turns[at].model_copy(update={"text": f"{token}: {both}"}), *turns[at + 1:]]
    verdict = check(task, hedged)
    assert not verdict.completion and "hedged_answer" in verdict.violations, (task.task_id, both, verdict)
    return True


@settings(max_examples=80, deadline=None)
@given(case=st.sampled_from(HEDGED), seed=SEEDS, data=st.data(), joint=st.sampled_from(JOINTS),
       before=st.booleans())
def test_a_hedge_is_never_right(case: tuple[str, str], seed: int, data: st.DataObject, joint: str,
                                before: bool) -> None:
    a_hedge_is_wrong(case, seed, lambda others: data.draw(st.sampled_from(others)), joint, before)


# --- games: a draw and an unfinished game never complete; a move out of turn ends the replay ---------------


def _abstaining_game(task: Task) -> list[Utterance]:
    """Every seat abstains at every choice and passes at every speech: nobody dies, the game ends drawn."""
    truth = task.truth
    game = get_game(truth["game"])
    state = game.deal(list(truth["players"]), int(truth["deal_seed"]), dict(truth.get("options") or {}))
    turns: list[Utterance] = []
    while (request := game.request(state)) is not None:
        text = "I pass." if request.kind == "speak" else ""
        turns.append(u(request.agent, text, request.kind))
        state = resolve(game, state, request, None, text if request.kind == "speak" else "").applied.state
    return turns


@pytest.mark.parametrize("level", LEVELS)
def test_a_drawn_game_never_completes(level: str) -> None:
    task = synthesize("werewolf", level, 1)
    verdict = check_game(task, _abstaining_game(task))
    assert verdict.detail["winner"] == "draw" and not verdict.completion and verdict.resolved_at is not None


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 5), data=st.data())
def test_a_move_out_of_turn_ends_the_replay(seed: int, data: st.DataObject) -> None:
    task = synthesize("werewolf", "easy", seed)
    win = _village_win(task)
    cut = data.draw(st.integers(0, len(win) - 1))
    intruder = data.draw(st.sampled_from([p for p in task.truth["players"] if p != win[cut].agent]))
    broken = [*win[:cut], u(intruder, "I speak now."), *win[cut:]]
    verdict = check_game(task, broken)
    assert not verdict.completion and verdict.violation_turns == [cut] and "out_of_turn" in verdict.violations
    assert verdict.detail["reason"] == "unfinished"
    assert check_game(task, broken[:cut + 1]) == verdict, "nothing after the move out of turn is read"


# --- two-seat: the speaker's share counts only its own items ----------------------------------------------


@pytest.mark.parametrize("family", list(TWO_SEAT_SHAPES))
def test_the_speakers_share_counts_only_its_own_items(family: str) -> None:
    for seed in range(5):
        task = synthesize(family, TWO_SEAT, seed)
        speaker, finder = task.truth["speaker"], task.truth["finder"]
        own, theirs = task.truth["lists"]
        shared = set(own) & set(theirs)
        foreign = "\n".join(x for x in theirs if x not in shared)
        listed = check(task, [u(speaker, foreign), u(finder, "No idea.")]).detail.get("speaker_listed")
        if listed is None:
            continue  # a shape that reports no speaker share
        assert listed == 0.0, (task.task_id, foreign)
        full = check(task, [u(speaker, "\n".join(own)), u(finder, "No idea.")]).detail["speaker_listed"]
        assert full == 1.0
        half = check(task, [u(speaker, "\n".join(own[:2]) + "\n" + foreign), u(finder, "No idea.")])
        assert half.detail["speaker_listed"] == 0.5


# --- rewards: a seat's outcome follows the verdict, and a leak costs only its speaker ------------------------


def scored(task: Task, turns: list[Utterance], config: RewardConfig | None = None) -> Rollout:
    seats = {n: SeatTrajectory(seat=n, role=task.agent(n).role) for n in task.names}
    for i, turn in enumerate(turns):
        seats[turn.agent].turns.append(SeatTurn(turn=i, prompt="", text=turn.text, prompt_ids=[], token_ids=[1],
                                                logprobs=[0.0]))
    rollout = Rollout(rollout_id="r", task_id=task.task_id, family=task.family, iteration=0, sample=0,
                      seats=list(seats.values()))
    return score(rollout, task, config or RewardConfig())[0]


MULTI_SEAT = [c for c in CASES if kind_of(c[0]) in ("episode", TWO_SEAT) and c[1] not in GAME_FAMILIES]


@settings(max_examples=40, deadline=None)
@given(case=st.sampled_from(MULTI_SEAT), seed=SEEDS)
def test_a_passed_task_pays_every_seat_its_completion_and_nothing_else(case: tuple[str, str], seed: int) -> None:
    task, turns = drawn(case, seed)
    config = RewardConfig(completion=0.75)
    rollout = scored(task, turns, config)
    for seat in rollout.seats:
        assert seat.outcome == 0.75 and not seat.violations
        assert sum(t.reward for t in seat.turns) == pytest.approx(0.75 if seat.turns else 0.0)


@settings(max_examples=40, deadline=None)
@given(case=st.sampled_from([c for c in LEAKY if kind_of(c[0]) == "episode"]), seed=SEEDS, data=st.data())
def test_a_leak_costs_its_speaker_and_completes_nothing(case: tuple[str, str], seed: int,
                                                       data: st.DataObject) -> None:
    task, turns = drawn(case, seed)
    owner, fact = data.draw(st.sampled_from(leaks(task)))
    config = RewardConfig(completion=1.0, violation=-0.25, max_violations=2)
    rollout = scored(task, [u(owner, f"Between us: {fact}."), *turns], config)
    for seat in rollout.seats:
        if seat.seat == owner:
            assert seat.outcome == -0.25 and seat.violations and seat.turns[0].filtered == "rule_breaking"
            assert seat.turns[0].reward <= 0.0
        else:
            assert seat.outcome == 0.0 and not seat.violations


# --- content-free replies: a policy that says nothing, or only ACCEPT, earns nothing ---------------------------


class Saying:
    """A policy that gives the same reply to every prompt, in every seat."""

    def __init__(self, text: str) -> None:
        self.text = text

    def generate(self, prompt: str, prefill: str = "", stop: Stop = None,
                 max_tokens: int | None = None) -> Generation:
        return Generation(text=self.text, prompt_ids=[1], token_ids=[1], logprobs=[0.0])


def offered(task: Task) -> bool:
    """Whether the task itself puts an offer on the table that a bare ACCEPT rightly takes (a decision's offer
    inside the buyer's limit)."""
    return task.level == DECISION and task.family == "negotiation" and bool(task.truth["inside"])


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}:{c[1]}")
def test_an_empty_or_bare_accept_reply_earns_nothing(case: tuple[str, str]) -> None:
    """Played through `SocialEnv` (every seat the same policy): an empty or blank reply completes nothing and earns
    no seat a reward; nor does ACCEPT alone, with nothing offered or asked (the secret's favour must be asked
    first), except to an offer the task itself puts on the table."""
    from swm.envs.seats import SocialEnv

    env = SocialEnv([case[1]], [case[0]], reward=RewardConfig(quality_filter=False))
    game = case[1] in GAME_FAMILIES  # a whole game per reply: one deal, one blank and one bare ACCEPT
    for seed in range(1 if game else 3):
        task = synthesize(case[1], case[0], seed)
        for text in ("", "ACCEPT") if game else ("", " ", "\n\t ", "ACCEPT", "ACCEPT."):
            if text.startswith("ACCEPT") and offered(task):
                continue
            episode = env.run(task, Saying(text))
            assert episode.failed is None, (task.task_id, text, episode.failed)
            assert not episode.verdict.get("completion"), (task.task_id, repr(text), episode.verdict)
            assert all(r <= 0.0 for r in episode.rewards.values()), (task.task_id, repr(text), episode.rewards)
