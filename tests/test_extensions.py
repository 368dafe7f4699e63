"""A new lifelong task family, two-seat family, level, advantage estimator and ToM benchmark, each added in this file.

Each is one row registered in its table — what docs/contributing.md's recipes ask of a real addition,
where the row lives in its module (a family's in `swm/tasks/shapes/`, `swm/tasks/two_seat.py` with two prompt files, a
level's own module such as
`swm/tasks/multi_turn.py`, `swm/training/advantages.py`, `swm/tom/loaders.py`). Nothing else changes: the
generator, prompts, checker, self-play's rollout and rewards, the config validation, the name policy, the CLI's
choices and the benchmark runner's loader and rules read the tables. The rows are removed again after each test.

A second two-seat family answers ``BOOK:``, a prefix `tests/test_reward_invariants.py` never names, with an
honest checker and a mutant that accepts a hedged answer: the invariants read the prefix from the row and
kill the mutant.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import click
import pytest
import test_reward_invariants as rules
from test_level_rows import conforms
from test_two_seat import Scripted

from swm.cli import main
from swm.errors import InputError
from swm.lifelong.plan import LifelongPlan
from swm.prompts import Prompt
from swm.selfplay.plan import SelfPlayPlan
from swm.selfplay.rewards import RewardConfig, score
from swm.selfplay.rollout import play
from swm.tasks.decisions import DecisionPrompt
from swm.tasks.families import (
    FAMILY_ROWS,
    SHARED,
    TWO_SEAT,
    TWO_SEAT_SHAPES,
    AgentBrief,
    Family,
    SeatPrompt,
    Task,
    TwoSeatShape,
    Variant,
    level_families,
    register_family,
    register_two_seat,
    synthesize,
    task_families,
    task_id,
    variant_for,
)
from swm.tasks.levels import LEVEL_ROWS, Level, register_level, seat_levels
from swm.tasks.splits import split_tasks
from swm.tasks.verdicts import Utterance, Verdict
from swm.tasks.verify import check
from swm.tom.items import BENCHMARKS, Benchmark, LoadOptions, TomItem, register_benchmark
from swm.tom.loaders import load_benchmark
from swm.tom.report import markdown, summarise
from swm.tom.rules import rule_line
from swm.tom.scoring import score_answer
from swm.training.advantages import (
    ESTIMATORS,
    AdvantageConfig,
    Estimator,
    assign_advantages,
    broadcast,
    discounted_return,
    register_estimator,
)
from swm.training.trajectory import Rollout, SeatTrajectory, SeatTurn

# --- a lifelong task family: the asker names a cause, the donor pledges the amount it holds as PLEDGE $N -----------


def _pledge(rng: random.Random, level: str, variant: Variant = SHARED) -> dict[str, Any]:
    asker, donor = variant.people(rng, 2)
    amount = rng.choice((15, 25, 40)) * (2 if level == "hard" else 1)
    agents = [AgentBrief(name=asker, role="asker", goal=f"Ask {donor} to pledge to the library fund."),
              AgentBrief(name=donor, role="donor", goal="Pledge what you set aside, as 'PLEDGE $N'.",
                         private=f"You set aside ${amount}.")]
    return {"scenario": f"{asker} asks {donor} for a pledge.", "agents": agents,
            "truth": {"asker": asker, "donor": donor, "amount": amount}}


def check_pledge(task: Task, turns: Sequence[Utterance]) -> Verdict:
    """The donor's first ``PLEDGE $N`` decides: complete when N is the amount it set aside."""
    for i, turn in enumerate(turns):
        found = re.search(r"PLEDGE \$(\d+)", turn.text) if turn.agent == task.truth["donor"] else None
        if found:
            right = int(found.group(1)) == task.truth["amount"]
            return Verdict(completion=right, violations=[] if right else ["wrong_answer"], evidence=[i],
                           violation_turns=[] if right else [i], resolved_at=i if right else None)
    return Verdict(completion=False)


PLEDGE = Family("pledge", generate=_pledge, check=check_pledge, reference=lambda t: [
    Utterance(agent=t.truth["asker"], text="Would you pledge to the fund?"),
    Utterance(agent=t.truth["donor"], text=f"Yes: PLEDGE ${t.truth['amount']}")])


# --- a two-seat family: each seat holds four colours, one shared; B names it as COLOUR: x ----------------------

COLOURS = ["red", "green", "blue", "gold", "teal", "plum", "rust", "sand", "mint", "navy"]
TEMPLATES = {"two_seat_colours_speak": "Your colours:\n{mine}\n\nTell {partner} all your colours.",
             "two_seat_colours_find": "Your colours:\n{mine}\n\n{partner} says:\n{said}\n\nName the shared one."}


def _shared_item_tasks(family: str, items: list[str], noun: str, scenario: str) -> Callable[..., Task]:
    """A two-seat family's task generator: each seat holds four of ``items``, one shared (``truth[noun]``); no names."""

    def generate(rng: random.Random, seed: int, split: str, variant: Variant) -> Task:
        shared, *rest = rng.sample(items, 7)
        lists = [sorted([shared, *rest[:3]]), sorted([shared, *rest[3:]])]
        agents = [AgentBrief(name=name, role=role, goal=f"Find the shared {noun}.", private=", ".join(mine))
                  for name, role, mine in zip(("Ann", "Bo"), ("speaker", "finder"), lists, strict=True)]
        return Task(task_id=task_id(family, TWO_SEAT, seed, split), family=family, level=TWO_SEAT, seed=seed,
                    split=split, scenario=scenario, agents=agents,
                    truth={noun: shared, "lists": lists, "speaker": "Ann", "finder": "Bo"})

    return generate


_colours_task = _shared_item_tasks("colours", COLOURS, "colour", "Ann and Bo share one colour.")


def check_colours(task: Task, turns: Sequence[Utterance]) -> Verdict:
    """The finder's first ``COLOUR:`` line decides: right when it names exactly the shared colour."""
    finder = task.truth["finder"]
    for i, turn in enumerate(turns):
        if turn.agent == finder and "COLOUR:" in turn.text:
            line = turn.text.split("COLOUR:", 1)[1].split("\n", 1)[0]
            named = {c for c in COLOURS if c in line.split() or f"{c}," in line}
            right = named == {task.truth["colour"]}
            code = [] if right else ["hedged_answer" if len(named) > 1 else "wrong_answer"]
            return Verdict(completion=right, violations=code, evidence=[i], violation_turns=[] if right else [i],
                           resolved_at=i if right else None, detail={"answered": True, "formatted": len(named) == 1})
    return Verdict(completion=False, detail={"answered": False, "formatted": False})


COLOURS_SHAPE = TwoSeatShape(
    family="colours", summary="A tells its colours, B names the shared one", generate=_colours_task,
    speak=SeatPrompt("two_seat_colours_speak", "My colours:", 16),
    find=SeatPrompt("two_seat_colours_find", "COLOUR:", 4, ends_line=True), check=check_colours,
    reference=lambda t: [Utterance(agent="Ann", text="My colours: " + ", ".join(t.truth["lists"][0])),
                         Utterance(agent="Bo", text=f"COLOUR: {t.truth['colour']}")],
    load=lambda name: Prompt(name=name, version="v1", text=TEMPLATES[name]))


# --- a two-seat family with an answer prefix the reward invariants never name: B names the shared book as BOOK: x ---

BOOKS = ["Dune", "Emma", "Ulysses", "Beloved", "Rebecca", "Kindred", "Solaris", "Middlemarch", "Walden", "Hamlet"]
BOOK_TEMPLATES = {"two_seat_book_speak": "Your books:\n{mine}\n\nTell {partner} all your books.",
                  "two_seat_book_find": "Your books:\n{mine}\n\n{partner} says:\n{said}\n\nName the shared one."}


_book_task = _shared_item_tasks("book", BOOKS, "book", "Ann and Bo have read one book in common.")


def _check_book(task: Task, turns: Sequence[Utterance], *, hedge_wins: bool) -> Verdict:
    """The finder's first ``BOOK:`` line decides: right when it names exactly the shared book, or, the mutant
    (``hedge_wins``), whenever the shared book is among the books it names."""
    for i, turn in enumerate(turns):
        if turn.agent == task.truth["finder"] and "BOOK:" in turn.text:
            named = set(re.findall(r"[A-Za-z]+", turn.text.split("BOOK:", 1)[1].split("\n", 1)[0])) & set(BOOKS)
            right = task.truth["book"] in named if hedge_wins else named == {task.truth["book"]}
            code = [] if right else ["hedged_answer" if len(named) > 1 else "wrong_answer"]
            return Verdict(completion=right, violations=code, evidence=[i], violation_turns=[] if right else [i],
                           resolved_at=i if right else None, detail={"answered": True, "formatted": len(named) == 1})
    return Verdict(completion=False, detail={"answered": False, "formatted": False})


def book_shape(check_book: Callable[[Task, Sequence[Utterance]], Verdict]) -> TwoSeatShape:
    """The ``book`` family's row with the given checker (the honest one or the mutant): nothing else differs."""
    return TwoSeatShape(
        family="book", summary="A tells its books, B names the shared one", generate=_book_task,
        speak=SeatPrompt("two_seat_book_speak", "My books:", 16),
        find=SeatPrompt("two_seat_book_find", "BOOK:", 6, ends_line=True), check=check_book,
        reference=lambda t: [Utterance(agent="Ann", text="My books: " + ", ".join(t.truth["lists"][0])),
                             Utterance(agent="Bo", text=f"BOOK: {t.truth['book']}")],
        load=lambda name: Prompt(name=name, version="v1", text=BOOK_TEMPLATES[name]))


HONEST, HEDGE_ACCEPTED = partial(_check_book, hedge_wins=False), partial(_check_book, hedge_wins=True)


# --- a level one model plays in both seats: A is told a colour and says it, B answers COLOUR: x --------------------


def _relay_task(family: str, seed: int, split: str, variant: Variant) -> Task:
    colour = random.Random(f"relay|{split}|{family}|{seed}|{variant.names}").choice(COLOURS)
    agents = [AgentBrief(name="Ann", role="teller", goal="Tell Bo your colour.", private=colour),
              AgentBrief(name="Bo", role="hearer", goal="Name Ann's colour.", private="")]
    return Task(task_id=task_id(family, "relay", seed, split), family=family, level="relay", seed=seed, split=split,
                scenario="Ann knows a colour; Bo must name it.", agents=agents,
                truth={"colour": colour, "speaker": "Ann", "finder": "Bo"})


def _relay_prompt(task: Task, agent: str, said: Sequence[tuple[str, str]]) -> DecisionPrompt:
    if agent == "Ann":
        return DecisionPrompt(name="relay_tell@v1", text=f"Your colour is {task.truth['colour']}. Tell Bo.",
                              prefill="", max_tokens=4)
    heard = " ".join(text for who, text in said if who == "Ann") or "(nothing)"
    return DecisionPrompt(name="relay_name@v1", text=f"Ann says: {heard}. Name her colour.", prefill="COLOUR:",
                          max_tokens=4, one_line=True)


RELAY = Level(name="relay", families=lambda: ("colour",), generate=_relay_task, check=check_colours, play="seats",
              seat_prompt=_relay_prompt, summary="A says its colour, B names it",
              reference=lambda t: [Utterance(agent="Ann", text=t.truth["colour"]),
                                   Utterance(agent="Bo", text=f"COLOUR: {t.truth['colour']}")])


# --- an estimator: critic-free, each seat's return minus the median of its role's returns -------------------


def _assign_median(rollouts: list[Rollout], cfg: AdvantageConfig, _baselines: dict[str, float]) -> None:
    seats = [s for r in rollouts for s in r.seats if s.turns]
    returns = [discounted_return([t.reward for t in s.turns], cfg.gamma) for s in seats]
    for seat, ret in zip(seats, returns, strict=True):
        mine = sorted(r for s, r in zip(seats, returns, strict=True) if s.role == seat.role)
        for turn, row in zip(seat.turns, broadcast(ret - mine[len(mine) // 2], [len(t.token_ids) for t in seat.turns]),
                             strict=True):
            turn.advantages, turn.returns = row, [ret] * len(row)


MEDIAN = Estimator("median", "a seat's return minus its role's median return", _assign_median, whiten=False)


# --- a ToM benchmark: a JSONL of location questions, scored by ToMi's rule --------------------------------------


def _load_tiny(path: Path, _options: LoadOptions) -> list[TomItem]:
    return [TomItem(id=row["id"], story=row["story"], question=row["question"], answer=row["answer"],
                    qtype="first_order", benchmark="tinytom", kind="location")
            for row in map(json.loads, path.read_text().splitlines())]


TINY = Benchmark("tinytom", task="tomi", load=_load_tiny, headline=("tiny-contains", "the gold in the answer"),
                 licence="CC0 (written for this test)", public=None, source=None, paper=(0.5, 0.7))


@pytest.fixture
def added() -> Iterator[None]:
    register_two_seat(COLOURS_SHAPE)
    register_estimator(MEDIAN)
    register_benchmark(TINY)
    register_level(RELAY)
    register_family(PLEDGE)
    yield
    del TWO_SEAT_SHAPES["colours"], ESTIMATORS["median"], BENCHMARKS["tinytom"], LEVEL_ROWS["relay"]
    del FAMILY_ROWS["pledge"]


def test_a_new_lifelong_family_is_generated_checked_held_to_the_rules_and_planned(added: None) -> None:
    """A family is its row: synthesize, check, the reward invariants (its reference the witness), the lifelong plan
    and the name policy read it."""
    for level in ("starter", "easy", "hard"):
        rules.test_the_witness_passes_and_nothing_completes_before_its_settling_turn((level, "pledge"))
    t = synthesize("pledge", "hard", 2)
    assert t == synthesize("pledge", "hard", 2) and t.family == "pledge" and t.truth["amount"] in (30, 50, 80)
    donor = t.truth["donor"]
    assert check(t, [Utterance(agent=donor, text=f"PLEDGE ${t.truth['amount']}")]).completion
    assert check(t, [Utterance(agent=donor, text="PLEDGE $1")]).violations == ["wrong_answer"]
    assert not check(t, [Utterance(agent=t.truth["asker"], text=f"PLEDGE ${t.truth['amount']}")]).completion
    assert "pledge" in task_families() and "pledge" in level_families("easy")
    plan = LifelongPlan(levels=["easy"], families=["pledge"])
    assert plan.families == ["pledge"]
    assert [task.family for task in split_tasks("test", ["easy"], ["pledge"], 2)] == ["pledge"] * 2


def test_a_new_two_seat_family_is_generated_prompted_checked_and_played(added: None) -> None:
    t = synthesize("colours", TWO_SEAT, 4)
    assert t == synthesize("colours", TWO_SEAT, 4) and len(set(t.truth["lists"][0]) & set(t.truth["lists"][1])) == 1
    rules.test_the_witness_passes_and_nothing_completes_before_its_settling_turn((TWO_SEAT, "colours"))
    other = next(c for c in t.truth["lists"][1] if c != t.truth["colour"])
    assert not check(t, [Utterance(agent="Ann", text=f"COLOUR: {t.truth['colour']}")]).completion, "A's says nothing"
    assert "hedged_answer" in check(t, [Utterance(agent="Bo", text=f"COLOUR: {other}, {t.truth['colour']}")]).violations
    sampler = Scripted([" " + ", ".join(t.truth["lists"][0]), f" {t.truth['colour']}"])
    rollout = play(t, sampler, rollout_id="r", iteration=0, sample=0, max_turns=4)
    assert rollout.end_reason == "settled" and [c[1:3] for c in sampler.calls] == [("My colours:", None),
                                                                                   ("COLOUR:", "\n")]
    scored, verdict = score(rollout, t, RewardConfig())
    assert verdict.passed and [s.turns[-1].reward for s in scored.seats] == [1.0, 1.0]


def test_a_new_level_is_generated_prompted_checked_played_and_planned(added: None) -> None:
    """A level is its row: synthesize, check, self-play's rollout and rewards, the plan and the name policy read it;
    the level table's conformance suite and the reward invariants (with the row's reference) hold it."""
    conforms(RELAY)
    rules.test_the_witness_passes_and_nothing_completes_before_its_settling_turn(("relay", "colour"))
    t = synthesize("colour", "relay", 5)
    assert t == synthesize("colour", "relay", 5) and t.level == "relay" and "relay" in seat_levels()
    assert check(t, [Utterance(agent="Bo", text=f"COLOUR: {t.truth['colour']}")]).completion
    sampler = Scripted([f" {t.truth['colour']}", f" {t.truth['colour']}"])
    rollout = play(t, sampler, rollout_id="r", iteration=0, sample=0, max_turns=4)
    assert rollout.end_reason == "settled" and [c[1:3] for c in sampler.calls] == [("", None), ("COLOUR:", "\n")]
    assert sampler.calls[1][0] == f"Ann says: {t.truth['colour']}. Name her colour."
    scored, verdict = score(rollout, t, RewardConfig())
    assert verdict.passed and [s.turns[-1].reward for s in scored.seats] == [1.0, 1.0]
    plan = SelfPlayPlan(family="colour", level="relay", tasks_per_iteration=3)
    assert [task.level for task in plan.training_tasks(0)] == ["relay"] * 3
    assert variant_for("relay", "train", "disjoint").names == "train"  # a generated level takes the name policy
    with pytest.raises(ValueError, match="no relay tasks of family 'negotiation'"):
        SelfPlayPlan(family="negotiation", level="relay")


@pytest.mark.parametrize("mutant", [False, True], ids=["honest", "accepts-a-hedge"])
def test_the_reward_invariants_hold_a_new_answer_prefix_to_the_hedge_rule(mutant: bool,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite reads a family's answer prefix from its row, so a ``BOOK:`` family it never heard of is held to the
    hedge rule: a checker that accepts an answer naming the shared book and another passes the witness, but the
    suite's hedge check fails on every hedge it is shown; the honest checker passes them all."""
    monkeypatch.setitem(TWO_SEAT_SHAPES, "book", book_shape(HEDGE_ACCEPTED if mutant else HONEST))
    case = (TWO_SEAT, "book")
    assert case in rules.hedged_cases(rules.cases()), "the suite's cases are read from the table"
    rules.test_the_witness_passes_and_nothing_completes_before_its_settling_turn(case)
    outcomes = []
    for seed in range(4):
        others = len(rules.answers(synthesize("book", TWO_SEAT, seed))) - 1  # every candidate but the right one
        for k, joint, before in itertools.product(range(others), rules.JOINTS, (False, True)):
            try:
                outcomes.append(rules.a_hedge_is_wrong(case, seed, lambda xs, k=k: xs[k], joint, before))
            except AssertionError:
                outcomes.append(None)
    assert len(outcomes) == 4 * 6 * 8
    if mutant:
        assert all(o is None for o in outcomes), "the suite's hedge check fails on every hedge the mutant accepts"
    else:
        assert all(outcomes), "every settling turn is a BOOK: answer, and the honest checker refuses every hedge"


def test_a_new_estimator_is_chosen_by_name(added: None) -> None:
    seats = [SeatTrajectory(seat=f"s{i}", role="r", turns=[SeatTurn(turn=0, prompt="", text="x", prompt_ids=[],
                                                                     token_ids=[1, 2], logprobs=[0.0, 0.0],
                                                                     reward=float(i))]) for i in range(3)]
    rollout = Rollout(rollout_id="r", task_id="t", iteration=0, sample=0, seats=seats)
    assign_advantages([rollout], AdvantageConfig(estimator="median"))
    assert [s.turns[0].advantages for s in seats] == [[-1.0, -1.0], [0.0, 0.0], [1.0, 1.0]]


def test_a_new_tom_benchmark_is_loaded_scored_and_offered(added: None, tmp_path: Path) -> None:
    data = tmp_path / "tiny.jsonl"
    data.write_text(json.dumps({"id": "q1", "story": "Ann put the ball in the box.", "question": "Where is the ball?",
                                "answer": "box"}) + "\n")
    items = load_benchmark("tinytom", data)
    assert [i.id for i in items] == ["q1"] and items[0].task == "tomi"
    assert score_answer(items[0], "In the box.")["rule"] == "tiny-contains"
    assert rule_line("tinytom").startswith("tiny-contains (the gold in the answer)")
    # what the report says about its data is the row's: not the simulator's line, not another benchmark's paper
    page = markdown(summarise([], []), "tinytom", {"models": "real"})
    assert "data licence: CC0 (written for this test); contamination: generated fresh, never public" in page
    assert "official scorer: swm's own rule" in page and "CoT 0.500 → S3AP 0.700" in page
    assert "simulator" not in page


def test_a_benchmark_row_must_say_what_its_report_says() -> None:
    """Licence, contamination, official source and paper numbers are row fields without defaults: a row that
    leaves them out fails where it is written, not in a report that guesses."""
    with pytest.raises(TypeError, match="licence"):
        Benchmark("bare", task="tomi", load=_load_tiny, headline=("x", "y"))  # type: ignore[call-arg]


def test_the_cli_offers_the_new_rows(added: None) -> None:
    selfplay, tom = main.commands["selfplay"], main.commands["bench"].commands["tom"]  # type: ignore[attr-defined]
    for command, option, value in ((selfplay, "family", "colours"), (selfplay, "estimator", "median"),
                                   (tom, "benchmark", "tinytom"), (selfplay, "level", "relay"),
                                   (selfplay, "family", "colour")):
        param = next(p for p in command.params if p.name == option)
        assert param.type.convert(value, param, None) == value
    families = next(p for p in main.commands["learn"].params if p.name == "families")  # type: ignore[attr-defined]
    assert families.type.convert("pledge", families, None) == ["pledge"]
    with pytest.raises(InputError, match=r"unknown family: pledgee .*persuasion, pledge\b"):
        families.type.convert("pledgee", families, None)
    param = next(p for p in selfplay.params if p.name == "estimator")
    with pytest.raises(click.BadParameter, match="median"):
        param.type.convert("nope", param, None)
