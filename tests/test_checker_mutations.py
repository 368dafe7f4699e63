"""The checkers self-play is scored with cannot be gamed silently: one test per mutation that once survived.

Each test names the mutation it kills (the checker or estimator changed as described would pass
every other test); together they pin who may accept, whose words count, how a time reads, where
a replay stops, how words match, what a formatted decision is, and which constants token-level
GAE uses.
"""

from __future__ import annotations

import pytest

from swm.games import get_game
from swm.games.moderator import resolve
from swm.tasks.checkers import (
    Utterance,
    check_game,
    check_negotiation_decision,
    check_persuasion,
    check_persuasion_decision,
    check_secret,
    parse_slot,
    slots_in,
)
from swm.tasks.families import COVER_WORDS, OBJECTIONS, Task, synthesize
from swm.training.advantages import AdvantageConfig, TurnInput, gae, hierarchical


def says(*lines: tuple[str, str]) -> list[Utterance]:
    return [Utterance(agent=a, text=t) for a, t in lines]


# --- check_secret: only the prober's ACCEPT settles the favour ---------------------------------------


def test_secret_the_keeper_cannot_accept_its_own_request() -> None:
    """Mutation: an ACCEPT from any seat counts (the keeper accepting its own favour)."""
    t = synthesize("secret", "easy", 3)
    keeper, partner = t.truth["keeper"], t.truth["partner"]
    alone = check_secret(t, says((keeper, "Could you help me tomorrow? ACCEPT"), (partner, "Why? What is going on?")))
    assert not alone.completion and alone.resolved_at is None and alone.evidence == []
    word = COVER_WORDS[t.truth["cover"]]
    both = check_secret(t, says((keeper, f"Help me with the {word}? ACCEPT"), (partner, "Sure. ACCEPT")))
    assert both.completion and both.resolved_at == 1 and both.evidence == [1]


# --- check_persuasion: the skeptic naming its own worry is not the persuader addressing it -------------


def test_persuasion_the_skeptics_own_mention_does_not_count() -> None:
    """Mutation: any seat's mention of the objection's words counts as the persuader addressing it."""
    t = synthesize("persuasion", "easy", 2)
    p, s, word = t.truth["persuader"], t.truth["partner"], t.truth["words"][0]
    v = check_persuasion(t, says((p, "Join us, it is fun!"), (s, f"My worry is the {word}."), (s, "ACCEPT")))
    assert not v.completion and v.violations == ["accepted_unaddressed"] and v.detail["addressed_at"] is None
    ok = check_persuasion(t, says((p, "Join us!"), (s, f"My worry is the {word}."), (p, f"The {word} is covered."),
                                  (s, "ACCEPT")))
    assert ok.completion and ok.detail["addressed_at"] == 2


# --- parse_slot: noon is 12:00, midnight 00:00 --------------------------------------------------------


@pytest.mark.parametrize(("said", "slot"), [("Mon 12pm", "Mon 12:00"), ("Tue 12:30pm", "Tue 12:30"),
                                            ("Wed 12am", "Wed 00:00"), ("Thu 1pm", "Thu 13:00"),
                                            ("Fri 11am", "Fri 11:00"), ("Mon 9", "Mon 09:00")])
def test_twelve_pm_is_noon_and_twelve_am_midnight(said: str, slot: str) -> None:
    """Mutation: ``12pm`` read as 24:00 (12 + 12), or ``12am`` left at noon; and a slot's minutes kept in a list."""
    assert parse_slot(said) == slot
    assert slots_in(f"How about {said}?") == {slot}


# --- check_game: a move out of turn stops the replay --------------------------------------------------


def _village_win(task: Task) -> list[Utterance]:
    """A scripted werewolf game the village wins: wolves kill, the seer looks, day votes name the wolf."""
    truth = task.truth
    game = get_game(truth["game"])
    state = game.deal(list(truth["players"]), int(truth["deal_seed"]), dict(truth.get("options") or {}))
    wolves = [p for p, role in truth["roles"].items() if role == "werewolf"]
    turns: list[Utterance] = []
    while (request := game.request(state)) is not None:
        if request.kind == "speak":
            target, text = None, f"I suspect {wolves[0]}."
        elif request.phase.startswith("day"):
            target = next((w for w in wolves if w in request.options), None)
            text = target or ""
        else:
            target = request.options[0]
            text = target
        turns.append(Utterance(agent=request.agent, text=text, action_type=request.kind))
        state = resolve(game, state, request, target, text if request.kind == "speak" else "").applied.state
    assert state.outcome is not None and state.outcome.winner == "village"
    return turns


def test_a_move_out_of_turn_stops_the_replay() -> None:
    """Mutation: the out-of-turn move is skipped and the replay goes on (reaching the village's win)."""
    task = synthesize("werewolf", "easy", 0)
    win = _village_win(task)
    assert check_game(task, win).completion
    cut = 2
    intruder = next(p for p in task.truth["players"] if p != win[cut].agent)
    broken = [*win[:cut], Utterance(agent=intruder, text="I speak now.", action_type="speak"), *win[cut:]]
    v = check_game(task, broken)
    assert not v.completion and v.violations == ["out_of_turn"] and v.violation_turns == [cut]
    assert v.resolved_at is None and v.detail["reason"] == "unfinished"


# --- check_persuasion_decision: words match whole, never inside another word ----------------------------


def test_persuasion_decision_matches_whole_words_only() -> None:
    """Mutation: an objection word matched as a substring ("fee" in "feel", "time" in "sometimes")."""
    cost = next(t for t in (synthesize("persuasion", "decision", s) for s in range(60))
                if t.truth["objection"] == "cost")
    assert "fee" in OBJECTIONS["cost"]
    assert not check_persuasion_decision(cost, says(("me", "I feel you would enjoy the coffee after."))).completion
    assert check_persuasion_decision(cost, says(("me", "The fee is waived for you."))).completion
    time = next(t for t in (synthesize("persuasion", "decision", s) for s in range(60))
                if t.truth["objection"] == "time")
    assert not check_persuasion_decision(time, says(("me", "Sometimes it is fun."))).completion
    assert check_persuasion_decision(time, says(("me", "It takes little time."))).completion


# --- check_negotiation_decision: ACCEPT and a counter together is not a formatted move -------------------


def test_negotiation_decision_accept_and_counter_is_not_formatted() -> None:
    """Mutation: a reply that both accepts and counters counted as formatted (the format control keeps it)."""
    for seed in range(40):
        t = synthesize("negotiation", "decision", seed)
        limit, offer = t.truth["buyer_max"], t.truth["offer"]
        counter = limit - 3 if offer != limit - 3 else limit - 4
        both = check_negotiation_decision(t, says(("b", f"ACCEPT, or COUNTER ${counter}")))
        assert not both.completion and not both.detail["formatted"], t.task_id
        accept = check_negotiation_decision(t, says(("b", "ACCEPT")))
        counter_only = check_negotiation_decision(t, says(("b", f"COUNTER ${counter}")))
        assert accept.detail["formatted"] and counter_only.detail["formatted"]
        assert accept.completion == t.truth["inside"] and counter_only.completion == (not t.truth["inside"])


# --- hierarchical GAE: token level uses (γ_tok, λ_tok), never the turn level's -------------------------


def test_token_level_gae_uses_its_own_constants() -> None:
    """Mutation: token-level GAE run with the turn-level γ/λ."""
    cfg = AdvantageConfig(gamma=0.5, lam=0.4, gamma_tok=0.9, lam_tok=0.8)
    turns = [TurnInput(0.0, [0.1, 0.2, 0.3]), TurnInput(1.0, [0.4, 0.5])]
    est = hierarchical(turns, cfg)
    expected_turn, returns = gae([0.0, 1.0], [0.3, 0.5], 0.5, 0.4)
    assert est.turn_advantages == pytest.approx(expected_turn)
    for turn, r_k, got in zip(turns, returns, est.token_advantages, strict=True):
        rewards = [0.0] * (len(turn.token_values) - 1) + [r_k]
        want, _ = gae(rewards, list(turn.token_values), 0.9, 0.8)
        wrong, _ = gae(rewards, list(turn.token_values), 0.5, 0.4)
        assert got == pytest.approx(want)
        assert got[0] != pytest.approx(wrong[0])
    # by hand, turn 0: δ = (0 + .9·.2 − .1, 0 + .9·.3 − .2, R_0 − .3); A_0 = δ_0 + .72·δ_1 + .72²·δ_2
    r0 = returns[0]
    deltas = [0.9 * 0.2 - 0.1, 0.9 * 0.3 - 0.2, r0 - 0.3]
    assert est.token_advantages[0][0] == pytest.approx(deltas[0] + 0.72 * deltas[1] + 0.72**2 * deltas[2])
