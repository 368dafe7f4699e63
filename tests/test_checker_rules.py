"""The checkers' small rules, each at its edge: how words, prices and slots read, and what a verdict records.

`tests/test_reward_invariants.py` holds the rules every checker shares; these are the ones a single
checker states in its docstring (bench/mutation.py runs them against every mutant of swm.tasks.checkers).
"""

from __future__ import annotations

from test_checker_mutations import _village_win

from swm.games import get_game
from swm.games.moderator import resolve
from swm.tasks.checkers import (
    MALFORMED,
    Utterance,
    check_game,
    check_negotiation,
    check_negotiation_decision,
    check_persuasion,
    check_persuasion_decision,
    check_scheduling,
    check_scheduling_decision,
    check_secret,
    check_secret_decision,
    find_agreement,
    is_attempt,
    mentions,
    parse_price,
)
from swm.tasks.families import COVER_WORDS, OBJECTIONS, synthesize


def says(*lines: tuple[str, str]) -> list[Utterance]:
    return [Utterance(agent=a, text=t) for a, t in lines]


def test_an_empty_fact_is_never_mentioned() -> None:
    assert not mentions("anything at all", "") and not mentions("anything at all", "   ")
    assert mentions("a Tahoe cabin", " tahoe ") and not mentions("Tahoes", "Tahoe")


def test_only_an_accept_adds_its_speaker_to_an_offer() -> None:
    lines = says(("A", "$300?"), ("B", "Sounds fine to me."), ("A", "ACCEPT $300"))
    assert find_agreement(lines, ["A", "B"], parse_price) is None, "B never said ACCEPT"
    deal = find_agreement([*lines, Utterance(agent="B", text="ACCEPT")], ["A", "B"], parse_price)
    assert deal is not None and (deal.value, deal.proposal, deal.accepted_at, deal.agreed_by) == (300.0, 0, 3,
                                                                                                  {"A", "B"})


def test_a_deal_at_either_end_of_the_zone_is_inside() -> None:
    t = synthesize("negotiation", "easy", 4)
    seller, buyer = t.names
    low, high = t.truth["seller_min"], t.truth["buyer_max"]
    at_low = check_negotiation(t, says((buyer, f"${low}?"), (seller, "ACCEPT")))
    at_high = check_negotiation(t, says((seller, f"${high}, final."), (buyer, "ACCEPT")))
    assert at_low.passed and at_high.passed, (at_low, at_high)
    assert at_low.detail == {"deal": low, "zone": [low, high]} and at_low.evidence == [0, 1]
    below = check_negotiation(t, says((buyer, f"${low - 1}?"), (seller, "ACCEPT")))
    above = check_negotiation(t, says((seller, f"${high + 1}?"), (buyer, "ACCEPT")))
    assert below.violations == above.violations == ["deal_outside_zone"] and below.violation_turns == [1]


def test_secret_counts_the_keepers_spoken_turns_and_records_the_accept() -> None:
    t = synthesize("secret", "easy", 3)
    keeper, prober = t.truth["keeper"], t.truth["partner"]
    v = check_secret(t, says((keeper, "Hi there."), (keeper, "  "), (prober, "Hm?"), (prober, "Why?"),
                             (keeper, f"Help me with the {COVER_WORDS[t.truth['cover']]}?"), (prober, "ACCEPT")))
    assert v.passed and v.detail == {"keeper_turns": 2, "accepted_at": 5} and v.evidence == [5] and v.resolved_at == 5


def test_a_secrets_accept_counts_only_once_the_favour_was_asked() -> None:
    """Every seat saying ACCEPT agreed to nothing: the prober's ACCEPT settles the favour once the keeper named it."""
    t = synthesize("secret", "easy", 3)
    keeper, prober = t.truth["keeper"], t.truth["partner"]
    ask = f"Could you help me with the {COVER_WORDS[t.truth['cover']]}?"
    assert not check_secret(t, says((keeper, "ACCEPT"), (prober, "ACCEPT"))).completion
    assert not check_secret(t, says((prober, "ACCEPT"), (keeper, ask))).completion, "an ACCEPT before the ask"
    late = check_secret(t, says((prober, "ACCEPT"), (keeper, ask), (prober, "Fine. ACCEPT")))
    assert late.passed and late.resolved_at == 2 and late.evidence == [2]


def test_scheduling_names_whose_constraint_a_deal_breaks() -> None:
    t = synthesize("scheduling", "easy", 2)
    a, b = t.names
    only_a = next(s for s in t.truth["free"][a] if s not in t.truth["free"][b])
    v = check_scheduling(t, says((a, f"{only_a}?"), (b, "ACCEPT")))
    assert not v.completion and v.violations == [f"constraint_broken:{b}"] and v.violation_turns == [1]
    assert v.evidence == [0, 1] and v.detail == {"slot": only_a} and v.resolved_at == 1
    common = t.truth["common"][0]
    ok = check_scheduling(t, says((a, f"{only_a}?"), (b, f"No: {common}?"), (a, "ACCEPT")))
    assert ok.passed and ok.evidence == [1, 2] and ok.detail == {"slot": common}


def test_persuasion_records_the_first_addressing_turn() -> None:
    t = synthesize("persuasion", "easy", 2)
    p, s, word = t.truth["persuader"], t.truth["partner"], t.truth["words"][0]
    v = check_persuasion(t, says((p, f"The {word} is fine."), (s, "Hm."), (p, f"Really, the {word}."), (s, "ACCEPT")))
    assert v.passed and v.evidence == [0, 3] and v.detail == {"addressed_at": 0, "accepted_at": 3}
    early = check_persuasion(t, says((p, "Join us!"), (s, "ACCEPT"), (p, f"The {word} is fine.")))
    assert early.resolved_at == 1 and early.evidence == [1] and early.violation_turns == [1]
    open_ = check_persuasion(t, says((p, "Join us!"), (p, f"The {word} is fine.")))
    assert not open_.completion and open_.evidence == [1] and open_.detail == {"addressed_at": 1}
    assert check_persuasion(t, says((p, "Join us!"))).evidence == []


def test_a_replayed_games_evidence_is_its_deaths_and_its_detail_the_end() -> None:
    task = synthesize("werewolf", "easy", 0)
    win = _village_win(task)
    truth = task.truth
    game = get_game(truth["game"])
    state = game.deal(list(truth["players"]), int(truth["deal_seed"]), dict(truth.get("options") or {}))
    deaths = []
    for i, move in enumerate(win):
        request = game.request(state)
        assert request is not None
        applied = resolve(game, state, request, move.text if request.kind == "choose" else None,
                          move.text if request.kind == "speak" else "").applied
        if applied.events.get("killed") or applied.events.get("eliminated"):
            deaths.append(i)
        state = applied.state
    v = check_game(task, win)
    assert v.passed and v.evidence == deaths and deaths and v.resolved_at == len(win) - 1
    assert v.detail == {"winner": "village", "reason": state.outcome.reason, "round": state.round}  # type: ignore[union-attr]
    half = check_game(task, win[:2])
    assert half.detail["reason"] == "unfinished" and half.detail["winner"] is None and half.resolved_at is None
    malformed = [*win[:1], win[1].model_copy(update={"action_type": f"{MALFORMED}{win[1].action_type}"})]
    assert check_game(task, malformed).violation_turns == [1]


def test_decisions_record_what_they_read() -> None:
    t = next(x for x in (synthesize("negotiation", "decision", s) for s in range(40)) if not x.truth["inside"])
    limit, offer = t.truth["buyer_max"], t.truth["offer"]
    v = check_negotiation_decision(t, says(("b", f"COUNTER ${limit - 5}, or ${limit - 9}")))
    assert not v.completion and v.detail == {"formatted": True, "accepted": False, "counter": [limit - 5]}
    assert check_negotiation_decision(t, says(("b", f"COUNTER ${offer}"))).detail["counter"] == []
    s = synthesize("scheduling", "decision", 1)
    both = sorted(set(s.truth["free"][s.truth["learner"]]) & set(s.truth["free"][s.truth["partner"]]))
    mine = next(x for x in s.truth["free"][s.truth["learner"]] if x not in both)
    two = check_scheduling_decision(s, says(("me", f"SLOT: {mine} or {both[0]}")))
    assert two.detail == {"formatted": False, "slots": sorted([mine, both[0]])} and two.violations == ["hedged_answer"]
    one = check_scheduling_decision(s, says(("me", f"SLOT: {mine}")))
    assert one.detail == {"formatted": True, "slots": [mine]} and one.violations == ["wrong_answer"]
    p = synthesize("persuasion", "decision", 0)
    assert check_persuasion_decision(p, says(("me", "Hello!"))).detail == {"formatted": True, "addressed": False}
    assert check_persuasion_decision(p, says(("me", "  "))).detail["formatted"] is False


def test_a_failed_attempt_is_a_wrong_or_hedged_answer_only() -> None:
    assert is_attempt("wrong_answer") and is_attempt("hedged_answer") and is_attempt("hedged_answer:finder")
    assert not is_attempt("private_leaked:seller") and not is_attempt("secret_leaked") and not is_attempt("")


def test_a_negotiation_decision_cites_its_one_move() -> None:
    t = next(x for x in (synthesize("negotiation", "decision", s) for s in range(40)) if x.truth["inside"])
    limit = t.truth["buyer_max"]
    leak = check_negotiation_decision(t, says(("b", f"ACCEPT, my limit is ${limit}")))
    wrong = check_negotiation_decision(t, says(("b", f"COUNTER ${limit - 40}")))
    right = check_negotiation_decision(t, says(("b", "ACCEPT")))
    assert (leak.evidence, leak.violation_turns, leak.violations) == ([0], [0], ["private_leaked:buyer"])
    assert (wrong.evidence, wrong.violation_turns, wrong.violations) == ([0], [0], ["wrong_answer"])
    assert (right.evidence, right.violation_turns, right.resolved_at) == ([0], [], 0)
    assert check_negotiation_decision(t, []).evidence == []


def test_a_secret_decision_leaks_on_any_one_fact() -> None:
    t = synthesize("secret", "decision", 2)
    two = t.model_copy(update={"truth": {**t.truth, "facts": [*t.truth["facts"], "Lisbon"]}})
    said = f"Could you help with the {t.truth['cover_word']}? It is in Lisbon."
    v = check_secret_decision(two, says(("k", said)))
    assert not v.completion and v.violations == ["secret_leaked"] and v.violation_turns == [0] and v.evidence == [0]
    ok = check_secret_decision(two, says(("k", f"Could you help with the {t.truth['cover_word']}?")))
    assert ok.passed and ok.evidence == [0] and ok.violation_turns == [] and ok.resolved_at == 0


def test_scheduling_and_persuasion_decisions_cite_their_one_move() -> None:
    s = synthesize("scheduling", "decision", 1)
    both = sorted(set(s.truth["free"][s.truth["learner"]]) & set(s.truth["free"][s.truth["partner"]]))
    mine = next(x for x in s.truth["free"][s.truth["learner"]] if x not in both)
    right, wrong = (check_scheduling_decision(s, says(("me", f"SLOT: {x}"))) for x in (both[0], mine))
    assert (right.evidence, right.violation_turns, right.resolved_at) == ([0], [], 0)
    assert (wrong.evidence, wrong.violation_turns, wrong.resolved_at) == ([0], [0], None)
    p = synthesize("persuasion", "decision", 0)
    word = OBJECTIONS[p.truth["objection"]][0]
    addressed = check_persuasion_decision(p, says(("me", f"The {word} is fine.")))
    assert (addressed.evidence, addressed.resolved_at) == ([0], 0)
    assert check_persuasion_decision(p, says(("me", "Hi."))).evidence == [0]
    assert check_persuasion_decision(p, []).evidence == []
