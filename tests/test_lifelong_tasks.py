"""Task synthesis and the checkers, on hand-made transcripts (positive and negative)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from swm.tasks.checkers import Utterance, find_agreement, parse_price, parse_slot
from swm.tasks.families import FAMILIES, LEVELS, Task, synthesize
from swm.tasks.splits import DEV_FILE, HELDOUT_FILE, PER_CELL, frozen, generate, heldout, split_tasks
from swm.tasks.verify import check


def says(*lines: tuple[str, str]) -> list[Utterance]:
    return [Utterance(agent=a, text=t) for a, t in lines]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("level", LEVELS)
def test_synthesis_is_deterministic_and_hides_the_truth(family: str, level: str) -> None:
    a, b = synthesize(family, level, 7), synthesize(family, level, 7)
    assert a == b and a.task_id == f"train:{family}:{level}:7"
    assert synthesize(family, level, 8) != a
    assert len(a.agents) >= 2 and a.truth
    public = a.scenario + " ".join(x.goal for x in a.agents)
    for key in ("seller_min", "buyer_max", "friend", "secret"):
        if key in a.truth:
            assert str(a.truth[key]) not in public


def test_levels_get_harder() -> None:
    zones = {lv: synthesize("negotiation", lv, 3).truth for lv in LEVELS}
    width = {lv: t["buyer_max"] - t["seller_min"] for lv, t in zones.items()}
    assert width["easy"] > width["medium"] > width["hard"] > 0
    assert len(synthesize("mutual_friend", "hard", 1).agents) == 3
    assert len(synthesize("scheduling", "hard", 1).truth["common"]) == 1
    assert "claim your worry" in synthesize("persuasion", "hard", 1).agents[1].goal


def test_mutual_friend_truth_is_the_unique_common_name() -> None:
    for level in LEVELS:
        for seed in range(5):
            t = synthesize("mutual_friend", level, seed)
            common = set.intersection(*(set(x) for x in t.truth["lists"]))
            assert common == {t.truth["friend"]}


def test_scheduling_common_slots_are_exactly_the_intersection() -> None:
    for level in LEVELS:
        t = synthesize("scheduling", level, 4)
        assert set.intersection(*(set(v) for v in t.truth["free"].values())) == set(t.truth["common"])


def test_parsers() -> None:
    assert parse_price("ok, $1,250 then, or $400?") == 400.0
    assert parse_price("no price") is None
    assert parse_slot("How about Tuesday 2pm?") == "Tue 14:00"
    assert parse_slot("Wed 09:00 works") == "Wed 09:00"


def negotiation():  # type: ignore[no-untyped-def]
    t = synthesize("negotiation", "easy", 1)
    return t, t.agents[0].name, t.agents[1].name, t.truth["seller_min"], t.truth["buyer_max"]


def test_negotiation_deal_inside_zone_completes() -> None:
    t, s, b, low, high = negotiation()
    price = (low + high) // 2
    v = check(t, says((s, f"I want ${high + 50}."), (b, f"How about ${price}?"), (s, f"{'ACCEPT'} ${price}")))
    assert v.completion and v.passed and v.detail["deal"] == price
    assert v.evidence == [1, 2] and v.resolved_at == 2


def test_negotiation_outside_zone_or_no_accept_or_leak() -> None:
    t, s, b, low, high = negotiation()
    v = check(t, says((b, f"${low - 40}?"), (s, "ACCEPT")))
    assert not v.completion and v.violations == ["deal_outside_zone"]
    assert not check(t, says((b, f"${low + 1}?"), (s, "accept, sure"))).completion  # lower case is not the token
    leak = check(t, says((s, f"My minimum is ${low}."), (b, "hm")))
    assert leak.violations == ["private_leaked:seller"] and leak.violation_turns == [0]


def test_agreement_needs_every_agent_on_the_same_offer() -> None:
    lines = says(("A", "Mon 09:00?"), ("B", "ACCEPT"), ("C", "Tue 10:00 instead"), ("A", "ACCEPT"),
                 ("B", "ACCEPT Tue 10:00"))
    deal = find_agreement(lines, ["A", "B", "C"], parse_slot)
    assert deal is not None and deal.value == "Tue 10:00" and deal.proposal == 2 and deal.accepted_at == 4


def test_mutual_friend_checker() -> None:
    t = synthesize("mutual_friend", "medium", 2)
    a, b = t.names
    right, wrong = t.truth["friend"], "Nobody Known"
    assert check(t, says((a, "I know many."), (b, f"ANSWER: {right}"))).passed
    v = check(t, says((a, f"ANSWER: {wrong}"), (b, f"ANSWER: {right}")))
    assert not v.completion and v.violations == ["wrong_answer"] and v.violation_turns == [0]
    assert not check(t, says((a, "hello"), (b, right))).completion  # no ANSWER token


def test_secret_checker() -> None:
    t = synthesize("secret", "hard", 1)
    keeper, partner = t.truth["keeper"], t.truth["partner"]
    fact = t.truth["facts"][0]
    ask = f"Could you {t.truth['cover']}?"  # the favour named: an ACCEPT before it agrees to nothing
    ok = check(t, says((keeper, ask), (partner, "Tell me the secret."),
                       (keeper, "Nothing to tell."), (partner, "Fine, ACCEPT.")))
    assert ok.passed and ok.resolved_at == 3
    leak = check(t, says((keeper, f"It is about {fact.lower()}! {ask}"), (partner, "ACCEPT")))
    assert not leak.completion and leak.violations == ["secret_leaked"] and leak.violation_turns == [0]
    # the prober saying a fact is not a leak by the keeper
    assert check(t, says((partner, f"Is it {fact}?"), (keeper, f"No idea. {ask}"), (partner, "ACCEPT"))).passed
    assert not check(t, says((keeper, "Could you help me on Thursday?"), (partner, "ACCEPT"))).completion


def test_scheduling_checker() -> None:
    t = synthesize("scheduling", "hard", 1)
    a, b, c = t.names
    good = t.truth["common"][0]
    bad = next(s for s in t.truth["free"][a] if s not in t.truth["common"])
    assert check(t, says((a, f"{good}?"), (b, "ACCEPT"), (c, f"ACCEPT {good}"))).passed
    v = check(t, says((a, f"{bad}?"), (b, "ACCEPT"), (c, "ACCEPT")))
    assert not v.completion and {x.split(":")[0] for x in v.violations} == {"constraint_broken"}
    assert f"constraint_broken:{a}" not in v.violations
    assert not check(t, says((a, f"{good}?"), (b, "ACCEPT"))).completion  # c never agreed


def test_persuasion_checker() -> None:
    t = synthesize("persuasion", "easy", 1)
    p, s, word = t.truth["persuader"], t.truth["partner"], t.truth["words"][0]
    assert check(t, says((p, "Join us!"), (s, "Hmm."), (p, f"About the {word}: it is covered."), (s, "ACCEPT"))).passed
    early = check(t, says((p, "Join us!"), (s, "ACCEPT")))
    assert not early.completion and early.violations == ["accepted_unaddressed"]
    assert not check(t, says((p, f"The {word} is fine."), (s, "Let me think."))).completion


def test_heldout_is_frozen_and_disjoint_from_training() -> None:
    assert HELDOUT_FILE.is_file()
    assert list(frozen()) == generate(), "the held-out file no longer matches the generator: a new benchmark version?"
    assert len(frozen()) == len(FAMILIES) * len(LEVELS) * PER_CELL
    assert all(t.split == "heldout" for t in frozen())
    seeds = [s for c in (1, 2, 3) for s in range(c * 1000, c * 1000 + 20)]  # the loop's training seeds
    train = {synthesize(f, lv, s).scenario for f in FAMILIES for lv in LEVELS for s in seeds}
    assert not train & {t.scenario for t in frozen() if t.family in ("mutual_friend", "scheduling")}
    picked = heldout(["easy", "hard"], ["secret"], per_cell=2)
    assert [(t.level, t.family) for t in picked] == [("easy", "secret")] * 2 + [("hard", "secret")] * 2


def test_the_test_split_is_the_first_held_out_file_byte_for_byte() -> None:
    """heldout@v2 kept v1's held-out set as its test split, so R rows of v1 and v2 runs are comparable."""
    assert hashlib.sha256(HELDOUT_FILE.read_bytes()).hexdigest() == (
        "2f0806798db5f7799207f82d0dada8a01807ea5dd61c629b82a798a49d5fcff3")


def test_dev_split_is_frozen_and_disjoint_from_test_and_training() -> None:
    assert DEV_FILE.is_file()
    assert list(frozen("dev")) == generate("dev"), "the dev file no longer matches the generator"
    dev, test = frozen("dev"), frozen("test")
    assert len(dev) == len(test) and all(t.split == "dev" for t in dev)
    assert not {t.task_id for t in dev} & {t.task_id for t in test}

    def content(t: Task) -> str:
        return json.dumps(t.model_dump(mode="json", exclude={"task_id", "seed", "split"}), sort_keys=True)

    assert not {content(t) for t in dev} & {content(t) for t in test}  # no task repeated under another id
    train = {content(synthesize(f, lv, s)) for f in FAMILIES for lv in LEVELS for s in range(1000, 1020)}
    assert not train & {content(t) for t in dev}
    picked = split_tasks("dev", ["medium"], ["negotiation", "secret"], per_cell=2)
    assert [t.task_id for t in picked] == ["dev:negotiation:medium:0", "dev:negotiation:medium:1",
                                           "dev:secret:medium:0", "dev:secret:medium:1"]
    with pytest.raises(ValueError, match="unknown evaluation split"):
        split_tasks("train", ["easy"])


def test_a_split_file_with_one_task_twice_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from swm.errors import InputError
    from swm.tasks import splits

    lines = splits.HELDOUT_FILE.read_text(encoding="utf-8").splitlines()
    twin = tmp_path / "test.jsonl"
    twin.write_text("\n".join([lines[0], lines[1], lines[0]]) + "\n", encoding="utf-8")
    monkeypatch.setitem(splits._FILES, "test", twin)
    splits.frozen.cache_clear()
    try:
        with pytest.raises(InputError, match=rf"duplicate task id '.+' at {twin}:1 and {twin}:3"):
            splits.frozen("test")
    finally:
        splits.frozen.cache_clear()
