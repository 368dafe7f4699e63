"""Two-turn tasks: a first move, a code partner's reply from the truth, a checked decision; the climb to them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from swm import prompts
from swm.checkpoints import open_store
from swm.cli import main
from swm.lifelong.plan import LifelongPlan
from swm.lifelong.records import ActedTurn, EpisodeRecord
from swm.lifelong.samples import load_samples, sample_rows, samples_of
from swm.nodes.update import export_cycle
from swm.tasks.checkers import Utterance
from swm.tasks.families import DECISION, TWO_TURN, curriculum_levels, decision_families, decision_task, synthesize
from swm.tasks.splits import decision_digest, split_tasks
from swm.tasks.two_turn import closing_prompt, opening_prompt, partner_reply, read_first_move
from swm.tasks.verify import check
from swm.testing import FakeOpenAIServer

# the first 50 two-turn tasks of each family's test split (bench.levels_base plays the first n) and a dev pin,
# names drawn from the eval pool (the default, disjoint from training's)
PINNED = {("test", "negotiation"): "bd02679891669bc3", ("test", "mutual_friend"): "149f68eb738c1615",
          ("test", "secret"): "8399fe28b7a13f45", ("test", "scheduling"): "9f448a0acefeec30",
          ("test", "persuasion"): "fb6c63f0c974eb5f", ("dev", "mutual_friend"): "90ccb10e151c3dd6"}
# the same with one shared pool (names="shared"): the splits measured before 2026-11-26, still reproducible
PINNED_SHARED = {("test", "negotiation"): "e103715d32fd116e", ("test", "mutual_friend"): "da2abf82621fee96",
                 ("test", "secret"): "3e6b02b95efe93cc", ("test", "scheduling"): "f281b702fc2cbd9d",
                 ("test", "persuasion"): "3b2271a1b10cfbc9", ("dev", "mutual_friend"): "7e3dde9b11b67ed0"}


def test_the_curriculum_puts_two_turn_between_decisions_and_episodes() -> None:
    assert curriculum_levels() == (DECISION, TWO_TURN, "starter", "easy", "medium", "hard")


@pytest.mark.parametrize("family", decision_families())
def test_a_two_turn_task_is_pure_its_own_and_its_prompts_short(family: str) -> None:
    task = synthesize(family, TWO_TURN, 7)
    assert task == decision_task(family, 7, level=TWO_TURN) and task.task_id == f"train:{family}:two-turn:7"
    assert task.truth != decision_task(family, 7).truth  # its own seeds: never a decision task's twin
    opening = opening_prompt(task)
    assert opening.name == prompts.load(f"two_turn_{family}_open").id and len(opening.text) < 400
    closing = closing_prompt(task, read_first_move(task, ""))
    assert closing.name == prompts.load(f"two_turn_{family}_close").id and len(closing.text) < 500
    assert "{" not in opening.text + closing.text
    with pytest.raises(ValueError, match="not a two-turn task"):
        opening_prompt(decision_task(family, 7))


def test_two_turn_splits_are_generated_disjoint_and_pinned() -> None:
    test = split_tasks("test", [TWO_TURN], ["mutual_friend"], 50)
    dev = split_tasks("dev", [TWO_TURN], ["mutual_friend"], 50)
    assert len(test) == len(dev) == 50 and {t.level for t in test + dev} == {TWO_TURN}
    contents = [{json.dumps(t.truth["lists"]) for t in part} for part in (test, dev)]
    assert not contents[0] & contents[1]
    for (split, family), want in PINNED.items():  # generated, not frozen: a changed generator is a new version
        assert decision_digest(split, family, 50, TWO_TURN) == want
    for (split, family), want in PINNED_SHARED.items():
        assert decision_digest(split, family, 50, TWO_TURN, names="shared") == want


def _common(task: Any) -> list[str]:
    free = task.truth["free"]
    return sorted(set(free[task.truth["learner"]]) & set(free[task.truth["partner"]]))


def _inside_and_outside(seed: int = 0) -> tuple[Any, Any]:
    tasks = [synthesize("negotiation", TWO_TURN, s) for s in range(seed, seed + 50)]
    return next(t for t in tasks if t.truth["inside"]), next(t for t in tasks if not t.truth["inside"])


def test_the_code_partner_replies_from_the_truth() -> None:
    friends = synthesize("mutual_friend", TWO_TURN, 1)
    asked = read_first_move(friends, "Who are your friends?")
    assert asked.ok and all(name in partner_reply(friends, asked) for name in friends.truth["lists"][1])
    silent = read_first_move(friends, "Hello there.")
    assert not silent.ok and friends.truth["friend"] not in partner_reply(friends, silent)
    inside, outside = _inside_and_outside()
    low = inside.truth["seller_min"]
    assert partner_reply(inside, read_first_move(inside, f"OFFER ${low + 1}")) == f"ACCEPT ${low + 1}."
    assert partner_reply(inside, read_first_move(inside, f"OFFER ${low - 40}")).endswith(
        f"I can sell it to you for ${inside.truth['offer']}.")
    meeting = synthesize("scheduling", TWO_TURN, 2)
    both, theirs = _common(meeting), meeting.truth["free"][meeting.truth["partner"]]
    mine_only = next(s for s in meeting.truth["free"][meeting.truth["learner"]] if s not in theirs)
    assert partner_reply(meeting, read_first_move(meeting, f"SLOT: {both[0]}")) == f"ACCEPT {both[0]}."
    assert all(s in partner_reply(meeting, read_first_move(meeting, f"SLOT: {mine_only}")) for s in theirs)
    worry = synthesize("persuasion", TWO_TURN, 3)
    assert worry.truth["worry"] in partner_reply(worry, read_first_move(worry, "What worries you?"))
    assert worry.truth["worry"] not in partner_reply(worry, read_first_move(worry, "Come along!"))
    secret = synthesize("secret", TWO_TURN, 4)
    favour = read_first_move(secret, f"Can you {secret.truth['cover']}?")
    assert favour.ok and secret.truth["cover_word"] in partner_reply(secret, favour)


def _turns(task: Any, opener: str, decision: str | None) -> list[Utterance]:
    learner, partner = task.truth["learner"], task.truth["partner"]
    turns = [Utterance(agent=learner, text=opener),
             Utterance(agent=partner, text=partner_reply(task, read_first_move(task, opener)))]
    return turns + ([Utterance(agent=learner, text=decision)] if decision is not None else [])


def _cases() -> list[tuple[str, Any, str, str, str, str]]:
    """Per family: (family, task, a right opener, a right decision, a wrong/hedged decision, a missing opener)."""
    friends = synthesize("mutual_friend", TWO_TURN, 5)
    friend = friends.truth["friend"]
    other = next(n for n in friends.truth["lists"][0] if n != friend)
    inside, outside = _inside_and_outside(10)
    low_in, low_out, limit = inside.truth["seller_min"], outside.truth["seller_min"], outside.truth["buyer_max"]
    meeting = synthesize("scheduling", TWO_TURN, 6)
    both = _common(meeting)
    mine_only = next(s for s in meeting.truth["free"][meeting.truth["learner"]] if s not in both)
    secret = synthesize("secret", TWO_TURN, 7)
    word, fact = secret.truth["cover_word"], secret.truth["facts"][0]
    worry = synthesize("persuasion", TWO_TURN, 8)
    said = worry.truth["words"][0]
    return [
        ("mutual_friend", friends, "Who are your friends?", f"ANSWER: {friend}", f"ANSWER: {friend}, {other}",
         "Nice weather."),
        ("negotiation", inside, f"OFFER ${low_in - 30}", "ACCEPT", f"COUNTER ${low_in - 50}", "Hello."),
        ("negotiation", outside, f"OFFER ${low_out - 30}", f"COUNTER ${limit - 10}", "ACCEPT",
         f"OFFER ${limit}"),  # naming the limit is a leak, not an opener
        ("scheduling", meeting, f"SLOT: {both[0]}", f"SLOT: {both[0]}", f"SLOT: {both[0]} or {mine_only}",
         "SLOT: whenever"),
        ("secret", secret, f"Could you help with the {word}?", f"Nothing much! Can you help with the {word}?",
         f"It is about {fact}. Help with the {word}?", "How are you?"),
        ("persuasion", worry, "What worries you about it?", f"Don't worry about the {said}, it is fine.",
         "It will be fun, come along!", "You should come."),
    ]


@pytest.mark.parametrize(("family", "task", "opener", "right", "wrong", "missing"), _cases(),
                         ids=[f"{case[0]}-{i}" for i, case in enumerate(_cases())])
def test_the_checker_needs_the_first_move_and_a_right_decision(family: str, task: Any, opener: str, right: str,
                                                                wrong: str, missing: str) -> None:
    good = check(task, _turns(task, opener, right))
    assert good.passed and good.detail["first_move"] and good.resolved_at == 2, good
    assert not check(task, _turns(task, opener, wrong)).completion
    no_opener = check(task, _turns(task, missing, right))
    assert not no_opener.completion and not no_opener.detail["first_move"]
    assert not check(task, _turns(task, opener, None)).completion  # no decision


def test_a_seller_who_takes_the_opener_is_confirmed_not_countered() -> None:
    inside, _ = _inside_and_outside(20)
    opener = f"OFFER ${inside.truth['seller_min'] + 2}"
    assert check(inside, _turns(inside, opener, "ACCEPT")).passed
    assert not check(inside, _turns(inside, opener, f"COUNTER ${inside.truth['seller_min'] - 30}")).completion


def test_a_two_turn_episode_gives_one_sample_per_learner_move_with_its_exact_prompt() -> None:
    task = synthesize("mutual_friend", TWO_TURN, 9)
    opener = "Who are your friends?"
    first = read_first_move(task, opener)
    shown = [opening_prompt(task).text, closing_prompt(task, first).text]
    turns = [ActedTurn(index=0, agent=task.truth["learner"], text=opener, prompt=shown[0]),
             ActedTurn(index=1, agent=task.truth["partner"], text=partner_reply(task, first)),
             ActedTurn(index=2, agent=task.truth["learner"], text=f"ANSWER: {task.truth['friend']}", prompt=shown[1])]
    record = EpisodeRecord(episode_id="e", run_id="r", cycle=2, task_id=task.task_id, family=task.family,
                           level=task.level, seed=1, turns=turns, verdict=check(task, turns))
    rows = samples_of([record], {"e": True})
    assert [(s.episode_id, s.prompt, s.completion, s.passed) for s in rows] == [
        ("e#0", shown[0], opener, True), ("e#2", shown[1], turns[2].text, True)]
    sft = sample_rows("rs-sft", rows)
    assert [(r["messages"][0]["content"], r["turn"], r["tools"]) for r in sft] == [(shown[0], 0, "null"),
                                                                                    (shown[1], 2, "null")]


SEEN: list[str] = []


def _oracle(prompt: str, body: dict[str, Any]) -> str:
    """Answer mutual_friend's decision and two-turn prompts rightly (the climb's scripted model); keep each prompt."""
    SEEN.append(prompt)
    if "Ask " in prompt and "for their friends" in prompt:
        return "Who are your friends?"
    names = re.findall(r"^- (.+)$", prompt, re.M)
    return f"ANSWER: {next(n for n in names if names.count(n) > 1)}"


def test_learn_climbs_from_decisions_to_two_turn_and_keeps_two_turn_samples(tmp_path: Path) -> None:
    db = tmp_path / "run.db"
    SEEN.clear()
    with FakeOpenAIServer(scripts={"<text>": _oracle}) as server:
        result = CliRunner().invoke(main, [
            "learn", "--model", server.model_spec, "--db", str(db), "--levels", "decision,two-turn",
            "--families", "mutual_friend", "--cycles", "2", "--episodes-per-level", "2", "--samples-per-task", "2",
            "--heldout-per-cell", "1", "--dev-per-cell", "1", "--thread-id", "climb", "--out", str(tmp_path / "out")],
            catch_exceptions=False)
    assert result.exit_code == 0, result.output
    store = open_store(db)
    collected = {(r["cycle"], r["level"], r["completion"]) for r in store.rows(
        "select cycle, level, completion from lifelong_episodes where phase = 'collect'")}
    assert collected == {(1, DECISION, 1), (2, TWO_TURN, 1)}  # cycle 1 trains on decisions, cycle 2 on two-turn
    evaluated = {r["level"] for r in store.rows("select level from lifelong_episodes where phase != 'collect'")}
    assert evaluated == {DECISION, TWO_TURN}
    # the rows rs-sft, dpo and kto read: the update node's export writes the kept-sample table
    rows, used = export_cycle(store, LifelongPlan(run_id="climb", balance=False), "rs-sft", [1, 2])
    samples = load_samples(store, "climb", [1, 2])
    two_turn = [s for s in samples if s.level == TWO_TURN]
    assert len(two_turn) == 4 and all(s.passed for s in two_turn)  # 2 episodes x 2 learner moves
    assert {s.episode_id[-2:] for s in two_turn} == {"#0", "#2"} and all(s.prompt in SEEN for s in two_turn)
    assert used == len(rows) == len(samples) == 6
    assert sum("replies:" in r["messages"][0]["content"] for r in rows) == 2  # the decisions after the reply
