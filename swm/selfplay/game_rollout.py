"""Self-play rollouts of a hidden-role game (Werewolf): one policy in every seat, through the game's moderator.

`play_game_rollout` plays a game with `swm.games.play_game` (the code moderator decides what is
legal and who won) and a decider backed by the self-play `Sampler`, so each move's prompt is the
game's own prompt for that seat (its perspective only) and the reply is plain text: a speech is
the text; a choice is the first legal option the text names (``none`` abstains where allowed).

An illegal or missing choice is a violation the moderator records and replaces by its fallback.
``illegal="filter"`` (the default) keeps the game, flags that move ``rule_breaking`` and lets the
reward penalise it (`swm.selfplay.rewards`: ``illegal_move`` at its own turn), the per-move
legality signal a model too small to name a legal target reliably can learn from.
``illegal="drop"`` fails the whole rollout instead: recorded with the reason and dropped, never
scored. A seat's role is its game role (werewolf, seer, doctor, villager).

Each seat's context is one chat that only grows (``transcript="append"``, `swm.training.transcript`):
its first move's message is the game's whole prompt for it; each later one holds only what it saw
since its last move and the moderator's request (`swm.games.moderator.turn_message`).
``transcript="rerender"`` gives every move the game's whole prompt again, as before.

The rollout's verdict keeps the game's per-role signals (its row's `HiddenRoleGame.signals`; Werewolf's,
`swm.games.signals.game_signals`: legal moves, village votes on a werewolf, the seer's checks and reveals,
werewolf survival), counted from the moderator's record of the game, which self-play pools per iteration.
"""

from __future__ import annotations

import json
import re
import time
from typing import Literal

from swm.games import Decision, Turn, get_game, play_game
from swm.games.moderator import turn_message
from swm.selfplay.rollout import Sampler, generate, record_appends, unusable
from swm.training.trajectory import Generation, Rollout, SeatTrajectory, SeatTurn
from swm.training.transcript import DEFAULT_TRANSCRIPT, SeatChat, Transcript, takes_chat


def parse_choice(text: str, options: list[str], allow_abstain: bool) -> str | None:
    """Return the option the text names first (full name or first name), ``none``, or None."""
    found: list[tuple[int, str]] = []
    for option in options:
        for name in {option, option.split()[0]}:
            match = re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text, re.I)
            if match:
                found.append((match.start(), option))
    if found:
        return min(found)[1]
    if allow_abstain and re.search(r"\bnone\b", text, re.I):
        return "none"
    return None


class SeatChats:
    """Each seat's append-only chat in a game and what of its perspective it has been shown (module docstring)."""

    def __init__(self, transcript: Transcript = DEFAULT_TRANSCRIPT) -> None:
        self.transcript = transcript
        self.chats: dict[str, SeatChat] = {}
        self.shown: dict[str, int] = {}

    def move(self, sampler: Sampler, turn: Turn) -> tuple[str, Generation]:
        """Ask ``sampler`` for the seat's move; return the message (or whole prompt) it was given and the reply."""
        seat = turn.request.agent
        if self.transcript != "append" or not takes_chat(sampler):
            return turn.prompt, sampler.generate(turn.prompt)
        chat = self.chats.setdefault(seat, SeatChat())
        message = turn.prompt if not chat.messages else turn_message(turn.request, turn.seen[self.shown[seat]:])
        gen = generate(sampler, message, chat)
        chat.extend(message, gen.text, gen.prompt_ids, gen.token_ids)
        self.shown[seat] = len(turn.seen)
        return message, gen


def play_game_rollout(game: str, sampler: Sampler, *, seed: int, players: int, options: dict[str, object],
                      rollout_id: str, task_id: str, iteration: int, sample: int,
                      illegal: Literal["drop", "filter"] = "filter",
                      transcript: Transcript = DEFAULT_TRANSCRIPT) -> Rollout:
    """Play one game with ``sampler`` in every seat; return the rollout (``failed`` on an error or, with
    ``illegal="drop"``, an illegal move)."""
    turns: dict[int, tuple[str, SeatTurn]] = {}
    rollout = Rollout(rollout_id=rollout_id, task_id=task_id, family=game, iteration=iteration, sample=sample)
    start = time.perf_counter()
    chats = SeatChats(transcript)

    def decide(turn: Turn) -> Decision:
        prompt, gen = chats.move(sampler, turn)
        why = unusable(gen)
        if why is not None:
            raise ValueError(why)
        text = gen.text.strip()
        turns[turn.index] = (turn.request.agent, SeatTurn(turn=turn.index, prompt=prompt, text=text,
                                                          prompt_ids=gen.prompt_ids, token_ids=gen.token_ids,
                                                          logprobs=gen.logprobs,
                                                          served_logprobs=gen.served_logprobs))
        rollout.tokens += len(gen.token_ids)
        if turn.request.kind == "speak":
            return Decision(text=text, policy="selfplay")
        target = parse_choice(text, turn.request.options, turn.request.allow_abstain)
        return Decision(target=target, text=text if turn.request.with_message else "", policy="selfplay")

    try:
        record = play_game(game, decide, seed=seed, n_players=players, options=dict(options), game_id=rollout_id)
    except Exception as err:  # noqa: BLE001 - any model or game error fails the rollout, recorded with its reason
        rollout.failed = f"{type(err).__name__}: {err}"[:500]
        rollout.seconds = time.perf_counter() - start
        return rollout
    roles = dict(record.roles)
    seats = {p: SeatTrajectory(seat=p, role=roles[p]) for p in record.players}
    broken = []
    for move in record.moves:
        if move.turn in turns:
            seat, seat_turn = turns[move.turn]
            if move.violation:
                broken.append(move.turn)
                seat_turn.filtered = "rule_breaking"
            seat_turn.state = json.loads(move.step) if move.step else None
            seats[seat].turns.append(seat_turn)
    if broken and illegal == "drop":
        first = next(m for m in record.moves if m.turn == broken[0])
        rollout.failed = f"illegal move at turn {first.turn} by {first.agent}: {first.violation}"
    outcome = record.outcome
    rollout.verdict = {"winner": outcome.winner if outcome else None, "reason": outcome.reason if outcome else None,
                       "rewards": outcome.rewards() if outcome else {}, "violation_turns": broken,
                       "signals": get_game(game).signals(record)}
    rollout.order = [m.agent for m in record.moves]
    rollout.seats = list(seats.values())
    record_appends(rollout.seats)
    rollout.end_reason = outcome.reason if outcome else "no outcome"
    rollout.seconds = time.perf_counter() - start
    return rollout
