"""Werewolf for 5–8 players, moderated by code.

Roles: werewolves (1 with 5 players, else 2; ``options["werewolves"]`` overrides), one seer, one
doctor (by default from 6 players; ``options["doctor"]``), villagers for the other seats. The
village side is everyone but the werewolves. Roles are dealt by a seeded shuffle, so a seed
names a deal.

A round is a night then a day:

* **Night.** Each living werewolf, in seat order, picks a victim among the living non-werewolves
  and may add a message; every living werewolf sees each pick and message, nobody else does.
  The victim is the most-picked player; a tie goes to the earliest pick among the tied. Then the
  seer checks one living player and alone learns whether that player is a werewolf; then the
  doctor protects one living player (itself allowed). A protected victim survives.
* **Day.** Everyone hears only the announcement: who was killed, or that nobody was (a save is
  not revealed as such). The living speak once each in seat order, then vote in seat order for a
  living player other than themselves, or abstain. Votes are secret until all are cast, then the
  tally is announced. The most-voted player is eliminated; **a tie eliminates nobody**. Roles are
  never revealed, not even on death.

Win conditions, checked by code whenever a phase ends: the village wins when no werewolf is
alive; the werewolves win when they are at least as many as the other living players. After the
day of round ``options["max_rounds"]`` (default 6) with no winner the game is a draw.

Illegal moves (the moderator's violations): a target that is no player (``no_such_player``),
a dead one (``dead_target``), oneself where that is not allowed (``self_target``), a werewolf
picking a werewolf (``teammate_target``), no target where one is required (``missing_target``),
a reply that does not fit the schema (``malformed``). The fallback is to abstain: no pick, no
check, no protection, no vote; a malformed speech keeps its text, or is silence.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from typing import Any, cast

from pydantic import Field

from swm.errors import InputError
from swm.games.base import DRAW, Applied, GameState, HiddenRoleGame, Move, Outcome, Request, register_game
from swm.games.records import GameRecord
from swm.games.signals import game_signals, summarise_signals
from swm.state import SocialStep

WEREWOLF, SEER, DOCTOR, VILLAGER = "werewolf", "seer", "doctor", "villager"
VILLAGE, WOLVES = "village", "werewolves"
NAMES = ("Ava", "Ben", "Cara", "Dev", "Eli", "Fay", "Gus", "Hana")
NIGHT_PHASES = ("night_wolves", "night_seer", "night_doctor")
PHASES = (*NIGHT_PHASES, "day_speak", "day_vote", "over")
DEFAULT_MAX_ROUNDS = 6


class WerewolfState(GameState):
    """Werewolf's own bookkeeping: who still acts in this phase, and this night's and day's choices."""

    queue: list[str] = Field(default_factory=list)  # seats still to act in this phase, in order
    picks: dict[str, str] = Field(default_factory=dict)  # werewolf -> its legal pick tonight, in pick order
    protected: str | None = None
    votes: dict[str, str | None] = Field(default_factory=dict)  # voter -> target (None: abstained)


class Werewolf(HiddenRoleGame):
    """Werewolf: werewolves who know each other against a village with a seer and a doctor."""

    name = "werewolf"
    sides = (VILLAGE, WOLVES)
    min_players = 5
    max_players = 8
    state_type = WerewolfState
    # a task is the village's to win: finding hidden werewolves among equally capable deceivers; the table grows
    # with the level: 5 seats (1 werewolf, no doctor), 6 (2 werewolves, a doctor), 8 (2 and a doctor)
    completes_for = VILLAGE
    players_by_level = {"starter": 5, "easy": 5, "medium": 6, "hard": 8}

    # ---- signals: legal moves by role, the village's votes, the seer's checks and reveals, werewolf survival ----
    def signals(self, record: object) -> dict[str, Any]:
        return game_signals(cast(GameRecord, record))

    def pool_signals(self, games: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
        return summarise_signals(games)

    # ---- setup ---------------------------------------------------------------------------
    def deal(self, players: list[str], seed: int, options: dict[str, Any] | None = None) -> WerewolfState:
        n = len(players)
        if not self.min_players <= n <= self.max_players:
            raise InputError(f"werewolf needs {self.min_players} to {self.max_players} players, got {n}")
        if len(set(players)) != n or any(not p.strip() or p.strip().casefold() == "none" for p in players):
            raise InputError(f"player names must be unique, non-empty and not 'none': {players}")
        opts: dict[str, Any] = {"werewolves": 1 if n == 5 else 2, "doctor": n >= 6,
                                "max_rounds": DEFAULT_MAX_ROUNDS}
        unknown = set(options or {}) - set(opts)
        if unknown:
            raise InputError(f"unknown werewolf options: {', '.join(sorted(unknown))}", f"use {', '.join(opts)}")
        opts.update(options or {})
        wolves, doctor = int(opts["werewolves"]), bool(opts["doctor"])
        villagers = n - wolves - 1 - int(doctor)
        if wolves < 1 or 2 * wolves >= n or villagers < 1:
            raise InputError(f"{wolves} werewolves{' and a doctor' if doctor else ''} do not fit {n} players",
                             "werewolves must be fewer than half the players, with one villager at least")
        roles = [WEREWOLF] * wolves + [SEER] + [DOCTOR] * int(doctor) + [VILLAGER] * villagers
        random.Random(f"werewolf|{seed}|{'|'.join(players)}").shuffle(roles)
        state = WerewolfState(game=self.name, seed=seed, players=list(players), roles=dict(zip(players, roles,
                              strict=True)), alive=list(players), phase="night_wolves", options=opts)
        self._enter(state, "night_wolves", {}, {})
        return state

    def side_of(self, state: GameState, seat: str) -> str:
        return WOLVES if state.roles[seat] == WEREWOLF else VILLAGE

    def rules(self, state: GameState) -> str:
        wolves = sum(r == WEREWOLF for r in state.roles.values())
        doctor = " and a doctor" if DOCTOR in state.roles.values() else ""
        return (f"Players: {', '.join(state.players)}. Among them are {wolves} werewolf(s), a seer{doctor}; the "
                "rest are villagers. Werewolves know each other; nobody else knows anyone's role, and roles "
                "are never revealed. Each night the werewolves pick a victim, the seer learns whether one player "
                "is a werewolf" + (", the doctor protects one player" if doctor else "") + ". Each day the "
                "death is announced, everyone speaks once, then everyone votes; the most-voted player is "
                "eliminated, and a tie eliminates nobody. The village wins when every werewolf is dead; the "
                "werewolves win when they are at least as many as the other living players.")

    def briefing(self, state: GameState) -> SocialStep:
        wolves = [p for p in state.players if state.roles[p] == WEREWOLF]
        seen = {}
        for seat in state.players:
            role = state.roles[seat]
            text = f"You are {seat}. Your secret role: {role}."
            if role == WEREWOLF:
                others = [w for w in wolves if w != seat]
                text += (f" Your fellow werewolves: {', '.join(others)}." if others else
                         " You are the only werewolf.") + " Keep your role hidden and survive."
            elif role == SEER:
                text += " Each night you learn whether one player is a werewolf. Help the village find them."
            elif role == DOCTOR:
                text += " Each night you protect one player from the werewolves. Help the village."
            else:
                text += " Find the werewolves and vote them out."
            seen[seat] = text
        return SocialStep(timestep="setup", scene=f"A game of werewolf begins with {', '.join(state.players)}.",
                          observations=seen, actions={})

    # ---- requests ------------------------------------------------------------------------
    def request(self, state: GameState) -> Request | None:
        s = _ww(state)
        if s.over or not s.queue:
            return None
        seat, r = s.queue[0], s.round
        others = [p for p in s.alive if p != seat]
        if s.phase == "night_wolves":
            targets = [p for p in s.alive if s.roles[p] != WEREWOLF]
            pack = [w for w in s.alive if s.roles[w] == WEREWOLF and w != seat]
            seen_by = f" Your fellow werewolves ({', '.join(pack)}) see your pick and message." if pack else ""
            return Request(agent=seat, phase=s.phase, kind="choose", options=targets, with_message=bool(pack),
                           instruction=f"Night {r}. Pick tonight's victim among: {', '.join(targets)}.{seen_by}")
        if s.phase == "night_seer":
            return Request(agent=seat, phase=s.phase, kind="choose", options=others,
                           instruction=f"Night {r}. As the seer, choose one player to learn whether they are a "
                                       f"werewolf, among: {', '.join(others)}.")
        if s.phase == "night_doctor":
            return Request(agent=seat, phase=s.phase, kind="choose", options=list(s.alive),
                           instruction=f"Night {r}. As the doctor, choose one player to protect tonight "
                                       f"(yourself allowed), among: {', '.join(s.alive)}.")
        if s.phase == "day_speak":
            return Request(agent=seat, phase=s.phase, kind="speak",
                           instruction=f"Day {r}. Your turn to speak to everyone: one short statement "
                                       "(suspicions, claims, defence).")
        return Request(agent=seat, phase=s.phase, kind="choose", options=others, allow_abstain=True,
                       instruction=f"Day {r}. Vote to eliminate one of: {', '.join(others)}; or none to abstain. "
                                   "Votes are revealed when everyone has voted.")

    def why_illegal(self, state: GameState, request: Request, target: str) -> str:
        if request.phase == "night_wolves" and state.roles.get(target) == WEREWOLF and target != request.agent:
            return "teammate_target" if target in state.alive else "dead_target"
        return super().why_illegal(state, request, target)

    # ---- moves ---------------------------------------------------------------------------
    def apply(self, state: GameState, request: Request, move: Move) -> Applied:
        s = _ww(state).model_copy(deep=True)
        seat, target = move.agent, move.target
        if not s.queue or s.queue[0] != seat:
            raise ValueError(f"{seat} may not act now: waiting for {s.queue[:1] or 'nobody'} in {s.phase}")
        s.queue.pop(0)
        seen: dict[str, list[str]] = {}
        events: dict[str, Any] = {}
        action = ""
        dialogue: dict[str, str] = {}
        if s.phase == "night_wolves":
            if target is not None:
                s.picks[seat] = target
            message = f' Message: "{move.text}"' if move.text and request.with_message else ""
            choice = target or "nobody"
            action = f"picked {choice} as tonight's victim{message}"
            for wolf in _living_wolves(s):
                line = f"You picked {choice}.{message}" if wolf == seat else \
                    f"Your fellow werewolf {seat} picked {choice}.{message}"
                _see(seen, wolf, line)
        elif s.phase == "night_seer":
            if target is None:
                _see(seen, seat, "You checked nobody tonight.")
                action = "checked nobody"
            else:
                is_wolf = s.roles[target] == WEREWOLF
                events.update(checked=target, is_werewolf=is_wolf)
                _see(seen, seat, f"Your vision: {target} is {'a werewolf' if is_wolf else 'not a werewolf'}.")
                action = f"checked {target}"
        elif s.phase == "night_doctor":
            s.protected = target
            _see(seen, seat, f"You protect {target} tonight." if target else "You protect nobody tonight.")
            action = f"protected {target or 'nobody'}"
        elif s.phase == "day_speak":
            text = move.text.strip() or "(stays silent)"
            for p in s.alive:
                _see(seen, p, f'{seat} said: "{text}"')
            action, dialogue = f"said: {text}", ({seat: move.text.strip()} if move.text.strip() else {})
        elif s.phase == "day_vote":
            s.votes[seat] = target
            _see(seen, seat, f"You voted for {target}." if target else "You abstained.")
            action = f"voted for {target}" if target else "abstained"
        else:
            raise ValueError(f"no move is possible in phase {s.phase}")
        if not s.queue:
            self._end_phase(s, seen, events)
        scene = f"Night {state.round}" if state.phase in NIGHT_PHASES else \
            f"Day {state.round}; alive: {', '.join(state.alive)}"
        step = SocialStep(timestep="", scene=scene, observations={p: " ".join(v) for p, v in seen.items()},
                          actions={seat: action}, dialogue=dialogue)
        return Applied(state=s, step=step, events=events)

    # ---- phases --------------------------------------------------------------------------
    def _end_phase(self, s: WerewolfState, seen: dict[str, list[str]], events: dict[str, Any]) -> None:
        """Close the current phase: resolve it, check the win conditions, open the next phase that has actors."""
        if s.phase == "night_wolves":
            self._enter(s, "night_seer", seen, events)
        elif s.phase == "night_seer":
            self._enter(s, "night_doctor", seen, events)
        elif s.phase == "night_doctor":
            self._resolve_night(s, seen, events)
        elif s.phase == "day_speak":
            self._enter(s, "day_vote", seen, events)
        elif s.phase == "day_vote":
            self._resolve_vote(s, seen, events)

    def _enter(self, s: WerewolfState, phase: str, seen: dict[str, list[str]], events: dict[str, Any]) -> None:
        """Open ``phase`` with its actors; a night phase whose actor is dead or absent is skipped."""
        s.phase = phase
        if phase == "night_wolves":
            s.picks, s.protected, s.votes = {}, None, {}
            s.queue = _living_wolves(s)
        elif phase in ("night_seer", "night_doctor"):
            role = SEER if phase == "night_seer" else DOCTOR
            s.queue = [p for p in s.alive if s.roles[p] == role]
        else:
            s.queue = list(s.alive)
        if not s.queue:
            self._end_phase(s, seen, events)

    def _resolve_night(self, s: WerewolfState, seen: dict[str, list[str]], events: dict[str, Any]) -> None:
        victim = night_victim(s.picks)
        wolves = _living_wolves(s)
        for wolf in wolves:
            _see(seen, wolf, f"The pack's victim tonight: {victim or 'nobody'}.")
        killed = victim if victim is not None and victim != s.protected else None
        events.update(victim=victim, protected=s.protected, killed=killed)
        announcement = (f"Day {s.round} begins: {killed} was killed during the night." if killed else
                        f"Day {s.round} begins: nobody was killed during the night.")
        for p in s.alive:
            _see(seen, p, announcement)
        if killed:
            s.alive.remove(killed)
        if not self._check_win(s, seen):
            self._enter(s, "day_speak", seen, events)

    def _resolve_vote(self, s: WerewolfState, seen: dict[str, list[str]], events: dict[str, Any]) -> None:
        eliminated, top = vote_result(s.votes)
        tally = ", ".join(f"{v} → {t}" if t else f"{v} abstained" for v, t in s.votes.items())
        if eliminated:
            verdict = f"{eliminated} is eliminated with {top} vote(s)."
        elif top:
            verdict = f"Tie at {top} vote(s): nobody is eliminated."
        else:
            verdict = "No votes: nobody is eliminated."
        events.update(eliminated=eliminated, votes=dict(s.votes))
        for p in s.alive:
            _see(seen, p, f"Votes: {tally}. {verdict}")
        if eliminated:
            s.alive.remove(eliminated)
        if self._check_win(s, seen):
            return
        if s.round >= int(s.options["max_rounds"]):
            self._finish(s, DRAW, f"no winner after {s.round} rounds", seen)
            return
        s.round += 1
        for p in s.alive:
            _see(seen, p, f"Night {s.round} falls.")
        self._enter(s, "night_wolves", seen, events)

    def _check_win(self, s: WerewolfState, seen: dict[str, list[str]]) -> bool:
        wolves = len(_living_wolves(s))
        if wolves == 0:
            self._finish(s, VILLAGE, "every werewolf is dead", seen)
        elif wolves >= len(s.alive) - wolves:
            self._finish(s, WOLVES, "the werewolves are at least as many as the others", seen)
        return s.over

    def _finish(self, s: WerewolfState, winner: str, reason: str, seen: dict[str, list[str]]) -> None:
        s.phase, s.queue = "over", []
        s.outcome = Outcome(winner=winner, reason=reason, round=s.round, roles=dict(s.roles),
                            sides={p: self.side_of(s, p) for p in s.players})
        said = "The game ends in a draw" if winner == DRAW else f"The game is over: the {winner} win"
        for p in s.players:
            _see(seen, p, f"{said} ({reason}).")


def night_victim(picks: dict[str, str]) -> str | None:
    """Return the most-picked victim; a tie goes to the earliest pick among the tied (picks keep their order)."""
    if not picks:
        return None
    counts = Counter(picks.values())
    best = max(counts.values())
    return next(t for t in picks.values() if counts[t] == best)


def vote_result(votes: dict[str, str | None]) -> tuple[str | None, int]:
    """Return (the eliminated player or None, the top vote count); a tie at the top eliminates nobody."""
    counts = Counter(t for t in votes.values() if t is not None)
    if not counts:
        return None, 0
    ranked = counts.most_common()
    top = ranked[0][1]
    if len(ranked) > 1 and ranked[1][1] == top:
        return None, top
    return ranked[0][0], top


def _ww(state: GameState) -> WerewolfState:
    if not isinstance(state, WerewolfState):
        raise TypeError(f"werewolf got a {type(state).__name__}")
    return state


def _living_wolves(s: GameState) -> list[str]:
    return [p for p in s.alive if s.roles[p] == WEREWOLF]


def _see(seen: dict[str, list[str]], seat: str, line: str) -> None:
    seen.setdefault(seat, []).append(line)


WEREWOLF_GAME = register_game(Werewolf())
