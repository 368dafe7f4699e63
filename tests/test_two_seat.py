"""The two-seat mutual-friend task: generation, splits pinned by digest, the checker, a scripted self-play rollout."""

from __future__ import annotations

from pathlib import Path

import pytest

from swm.errors import InputError
from swm.selfplay.checkpoint import warm_start_adapter
from swm.selfplay.plan import SelfPlayPlan
from swm.selfplay.rewards import RewardConfig, score
from swm.selfplay.rollout import play
from swm.tasks.checkers import Utterance
from swm.tasks.families import TWO_SEAT, Task, synthesize
from swm.tasks.splits import decision_digest, split_tasks
from swm.tasks.two_seat import FIND_PREFILL, SPEAK_PREFILL, seat_prompt
from swm.tasks.verify import check
from swm.training.trajectory import Generation

# the splits' first tasks, pinned: a change to the generator that moves them fails here (a new benchmark version);
# names from the eval pool (training from the train pool) since 2026-11-28, and the shared pool's, which the results
# measured before then used (docs/results/selfplay.md's split 096c322ab04ba0eb)
DIGESTS = {("test", 200): "22b4ce58c1e70cfb", ("dev", 100): "131bf68c331564ef"}
SHARED_DIGESTS = {("test", 200): "096c322ab04ba0eb", ("dev", 100): "ae02860eecf4ad20"}
TEST_TASKS = 200


def says(*lines: tuple[str, str]) -> list[Utterance]:
    return [Utterance(agent=a, text=t) for a, t in lines]


def test_a_two_seat_task_has_a_speaker_a_finder_and_one_shared_friend() -> None:
    t = synthesize("mutual_friend", TWO_SEAT, 3, split="heldout")
    assert t == synthesize("mutual_friend", TWO_SEAT, 3, split="heldout")
    assert t.task_id == "heldout:mutual_friend:two-seat:3" and t.level == TWO_SEAT
    assert [a.role for a in t.agents] == ["speaker", "finder"]
    a, b = t.truth["lists"]
    assert set(a) & set(b) == {t.truth["friend"]} and len(a) == len(b) == 4
    assert (t.truth["speaker"], t.truth["finder"]) == tuple(t.names)
    with pytest.raises(ValueError, match="no two-seat shape"):
        synthesize("negotiation", TWO_SEAT, 0)


@pytest.mark.parametrize(("split", "n"), sorted(DIGESTS))
def test_the_splits_are_pinned_by_digest(split: str, n: int) -> None:
    assert decision_digest(split, "mutual_friend", n, level=TWO_SEAT) == DIGESTS[(split, n)]
    assert decision_digest(split, "mutual_friend", n, level=TWO_SEAT, names="shared") == SHARED_DIGESTS[(split, n)]


@pytest.mark.parametrize("family", ["mutual_friend", "scheduling"])
def test_training_and_test_names_come_from_disjoint_pools(family: str) -> None:
    def people(tasks: list[Task]) -> set[str]:  # the seats, and mutual friend's lists (scheduling's hold slots)
        listed = [x for t in tasks if family == "mutual_friend" for names in t.truth["lists"] for x in names]
        return {*listed, *(n for t in tasks for n in t.names)}

    test = split_tasks("test", [TWO_SEAT], [family], TEST_TASKS)
    train = [t for i in range(8) for t in SelfPlayPlan(family=family, level=TWO_SEAT,
                                                        tasks_per_iteration=25).training_tasks(i)]
    assert people(train) and not people(train) & people(test)
    shared = SelfPlayPlan(family=family, level=TWO_SEAT, tasks_per_iteration=25, names="shared")
    assert people([t for i in range(8) for t in shared.training_tasks(i)]) & people(
        split_tasks("test", [TWO_SEAT], [family], TEST_TASKS, names="shared"))  # the pool before the split


def test_the_splits_are_disjoint_and_the_test_split_is_large_enough() -> None:
    test = split_tasks("test", [TWO_SEAT], ["mutual_friend"], TEST_TASKS)
    dev = split_tasks("dev", [TWO_SEAT], ["mutual_friend"], 100)
    train = [t for i in range(12) for t in SelfPlayPlan(family="mutual_friend", level=TWO_SEAT,
                                                         tasks_per_iteration=25).training_tasks(i)]
    assert len({t.task_id for t in test}) == TEST_TASKS
    content = [{(t.truth["friend"], tuple(map(tuple, t.truth["lists"]))) for t in split}
               for split in (test, dev, train)]
    assert not content[0] & content[1] and not content[0] & content[2] and not content[1] & content[2]
    plan = SelfPlayPlan(family="mutual_friend", level=TWO_SEAT, eval_tasks=TEST_TASKS)
    assert [t.task_id for t in plan.evaluation_tasks()] == [t.task_id for t in test]


def test_only_the_finders_first_answer_counts() -> None:
    t = synthesize("mutual_friend", TWO_SEAT, 1)
    a, b = t.names
    friend, other = t.truth["friend"], next(n for n in t.truth["lists"][1] if n != t.truth["friend"])
    mine = "\n".join(t.truth["lists"][0])
    ok = check(t, says((a, f"My friends:\n{mine}"), (b, f"ANSWER: {friend}")))
    assert ok.passed and ok.resolved_at == 1 and ok.detail["speaker_listed"] == 1.0 and ok.detail["friend_said"]
    # the speaker cannot know the friend: its answer is not the task's, right or wrong
    assert not check(t, says((a, f"ANSWER: {friend}"), (b, "Hmm."))).completion
    assert check(t, says((a, f"ANSWER: {other}"), (b, f"ANSWER: {friend}"))).passed
    wrong = check(t, says((a, "Hi"), (b, f"ANSWER: {other}"), (a, "No."), (b, f"ANSWER: {friend}")))
    assert not wrong.completion and wrong.violations == ["wrong_answer"]
    hedge = check(t, says((a, "Hi"), (b, f"ANSWER: {friend}, {other}")))
    assert not hedge.completion and hedge.violations == ["hedged_answer"]


class Scripted:
    """Replies in order, one token a word; records each prompt and its prefill."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = iter(replies)
        self.calls: list[tuple[str, str, str | None, int | None]] = []

    def generate(self, prompt: str, prefill: str = "", stop: str | None = None,
                 max_tokens: int | None = None) -> Generation:
        self.calls.append((prompt, prefill, stop, max_tokens))
        text = next(self.replies)
        words = text.split() or [""]
        return Generation(text=prefill + text, prompt_ids=[0, 1], token_ids=list(range(10, 10 + len(words))),
                          logprobs=[-1.0] * len(words))


def test_one_policy_plays_both_seats_and_both_get_the_joint_reward() -> None:
    t = synthesize("mutual_friend", TWO_SEAT, 2)
    a, b = t.names
    listed = "\n" + "\n".join(t.truth["lists"][0])
    sampler = Scripted([listed, f" {t.truth['friend']}", "never said"])
    rollout = play(t, sampler, rollout_id="r", iteration=0, sample=0, max_turns=4)
    assert rollout.end_reason == "settled" and rollout.order == [a, b]
    (p0, pre0, stop0, _), (p1, pre1, stop1, cap1) = sampler.calls
    assert (pre0, stop0, pre1, stop1, cap1) == (SPEAK_PREFILL, None, FIND_PREFILL, "\n", 12)
    assert all(n in p0 for n in t.truth["lists"][0]) and not any(n in p0 for n in t.truth["lists"][1]
                                                                  if n != t.truth["friend"])
    assert t.truth["lists"][0][-1] in p1 and all(n in p1 for n in t.truth["lists"][1])
    assert p1 == seat_prompt(t, b, [(a, SPEAK_PREFILL + listed)]).text
    scored, verdict = score(rollout, t, RewardConfig())
    assert verdict.passed
    assert [s.role for s in scored.seats] == ["speaker", "finder"]
    assert [s.turns[-1].reward for s in scored.seats] == [1.0, 1.0]


def test_warm_start_finds_the_adapter(tmp_path: Path) -> None:
    learn = tmp_path / "learn"
    one = learn / "adapters" / "p1"
    one.mkdir(parents=True)
    (one / "adapter_config.json").write_text("{}")
    assert warm_start_adapter(one) == one and warm_start_adapter(learn) == one
    (learn / "adapters" / "p2").mkdir()
    (learn / "adapters" / "p2" / "adapter_config.json").write_text("{}")
    with pytest.raises(InputError, match="holds 2 adapters"):
        warm_start_adapter(learn)
    run = tmp_path / "sp"
    (run / "checkpoints" / "iter-0003" / "adapter").mkdir(parents=True)
    (run / "checkpoints" / "iter-0003" / "adapter" / "adapter_config.json").write_text("{}")
    (run / "checkpoints" / "LATEST").write_text("3")
    assert warm_start_adapter(run) == run / "checkpoints" / "iter-0003" / "adapter"
    with pytest.raises(InputError, match="no adapter"):
        warm_start_adapter(tmp_path / "nothing")


def test_the_shuffled_control_moves_joint_rewards_together() -> None:
    """The control permutes whole rollouts' rewards: every seat of a rollout gets one other rollout's, jointly."""
    from swm.selfplay.loop import shuffle_rewards
    from swm.training.trajectory import Rollout, SeatTrajectory, SeatTurn

    def rollout(i: int, reward: float) -> Rollout:
        seats = [SeatTrajectory(seat=s, role=role, outcome=reward + k,
                                turns=[SeatTurn(turn=k, prompt="", text="x", prompt_ids=[], token_ids=[1],
                                                logprobs=[0.0], reward=reward + k)])
                 for k, (s, role) in enumerate((("A", "speaker"), ("B", "finder")))]
        return Rollout(rollout_id=f"r{i:02d}", task_id="t", iteration=0, sample=i, seats=seats)

    rollouts = [rollout(i, float(i)) for i in range(12)]
    shuffle_rewards(rollouts, 3)
    pairs = [(r.seats[0].turns[0].reward, r.seats[1].turns[0].reward) for r in rollouts]
    assert all(b == a + 1 for a, b in pairs), "a rollout's seats keep one rollout's joint reward"
    assert sorted(a for a, _ in pairs) == [float(i) for i in range(12)]
    assert [a for a, _ in pairs] != [float(i) for i in range(12)]
    again = [rollout(i, float(i)) for i in range(12)]
    shuffle_rewards(again, 3)
    assert [(r.seats[0].turns[0].reward, r.seats[1].turns[0].reward) for r in again] == pairs  # seeded
