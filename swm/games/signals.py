"""Per-role signals of a Werewolf game that the moderator can check, read from its own record, beside win and draw.

Werewolf's row declares them (`Werewolf.signals`, `Werewolf.pool_signals`), and self-play reads them from the row.

Self-play's game reward is one ±1 a seat, which a small model reaches rarely and noisily. These
signals are read from the moderator's record of a game (`GameRecord`: every move as resolved,
its violation, its legal options, the night's and the vote's events), never from what a seat
claimed. `game_signals` counts them in one game; `summarise_signals` pools the counts of many
games and gives each an interval:

* **legal moves**, per role and over all: a seat's ``choose`` moves (a pick, a check, a
  protection, a vote) and how many the moderator accepted. A speech is left out: in self-play
  its text is the speech, so it cannot be illegal and would only inflate the rate.
* **village votes**: the share of the village side's day votes cast for a player (an abstention,
  or a reply naming nobody, is a legal vote for nobody; an illegal one is none either), and of
  those cast how many named a werewolf, beside **chance**: the same votes' expected
  hits for a voter choosing uniformly among its options, Σ (werewolves among the voter's
  options) / (options). ``z`` is the hits against chance (a Poisson–binomial normal
  approximation, (hits − Σp) / √Σp(1 − p)).
* **seer**: its legal checks and how many found a werewolf (chance as for votes); and its
  *reveals*: of the seer's day speeches made while it knew a living werewolf from its own checks,
  how many named that werewolf (the record shows the name was said, not what was claimed of it).
* **werewolf survival**: per werewolf, the rounds it survived (killed or eliminated in round r:
  r − 1; alive when the game ended: the game's last round) and whether it was alive at the end.
* **outcome**: the winning side or a draw.

Proportions carry a 95% Wilson interval, rounds survived a 95% t interval over werewolves. Moves
and votes of one game are not independent (one policy at one table), so their pooled intervals
are narrower than the truth; the intervals over games (wins, survival) are the ones to compare
policies by. `units_for_half_width` says how many pooled units any proportion needs for a given
half-width whatever its rate (21 for ±0.2).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from swm.games.base import DRAW
from swm.games.records import GameRecord
from swm.stats import Z95, mean_ci, wilson_interval

ROLES = ("werewolf", "seer", "doctor", "villager")
VILLAGE = "village"


def _named(text: str, seat: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(seat)}(?!\w)", text, re.I) is not None


def _chance(options: list[str], wolves: set[str]) -> float:
    return sum(o in wolves for o in options) / len(options) if options else 0.0


def game_signals(record: GameRecord) -> dict[str, Any]:
    """Count one finished game's signals (see the module docstring): plain numbers, stored with a rollout."""
    wolves = {p for p, role in record.roles.items() if role == "werewolf"}
    alive = set(record.players)
    known: set[str] = set()  # werewolves the seer found
    moves = {role: 0 for role in ROLES}
    legal = {role: 0 for role in ROLES}
    ballots = votes = vote_hits = checks = check_hits = speeches = reveals = 0
    vote_chance: list[float] = []
    check_chance: list[float] = []
    died: dict[str, int] = {}
    for m in record.moves:
        role = m.role
        if m.kind == "choose":
            moves[role] = moves.get(role, 0) + 1
            legal[role] = legal.get(role, 0) + (m.violation is None)
        if m.phase == "day_vote" and record.sides[m.agent] == VILLAGE:
            ballots += 1
        if m.phase == "day_vote" and record.sides[m.agent] == VILLAGE and m.target is not None:
            votes += 1
            vote_hits += m.target in wolves
            vote_chance.append(_chance(m.options, wolves))
        if m.phase == "night_seer" and m.target is not None:
            checks += 1
            check_hits += m.target in wolves
            check_chance.append(_chance(m.options, wolves))
            if m.target in wolves:
                known.add(m.target)
        if m.phase == "day_speak" and role == "seer" and known & alive:
            speeches += 1
            reveals += any(_named(m.text, wolf) for wolf in known & alive)
        for event in ("killed", "eliminated"):
            gone = m.events.get(event)
            if isinstance(gone, str) and gone in alive:
                alive.discard(gone)
                died[gone] = m.round
    last = record.outcome.round if record.outcome else max((m.round for m in record.moves), default=1)
    return {"moves": moves, "legal": legal, "ballots": ballots, "votes": votes, "vote_hits": vote_hits,
            "vote_chance": sum(vote_chance), "vote_chance_var": sum(p * (1 - p) for p in vote_chance),
            "checks": checks, "check_hits": check_hits, "check_chance": sum(check_chance),
            "seer_speeches": speeches, "seer_reveals": reveals,
            "wolf_rounds": [died[w] - 1 if w in died else last for w in sorted(wolves)],
            "wolf_alive": [w not in died for w in sorted(wolves)],
            "winner": record.outcome.winner if record.outcome else None}


def rate(hits: float, n: int) -> dict[str, Any]:
    """A proportion with its 95% Wilson interval and the interval's half-width."""
    lo, hi = wilson_interval(hits, n)
    return {"rate": hits / n if n else None, "ci95": [round(lo, 4), round(hi, 4)], "half": round((hi - lo) / 2, 4),
            "n": n, "hits": hits}


def units_for_half_width(half: float, z: float = Z95) -> int:
    """The fewest pooled units a proportion needs for a 95% Wilson interval of half-width at most ``half`` at any
    rate (the widest is at rate ½: z·√(¼n + z²/4n²) / (1 + z²/n))."""
    n = 1
    while z * math.sqrt(0.25 / n + z * z / (4 * n * n)) / (1 + z * z / n) > half:
        n += 1
    return n


def summarise_signals(games: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Pool the per-game counts of `game_signals`: every signal with its interval, and per game how many units each
    signal pooled (``per_game``), from which the games an interval of a given width needs follow."""
    counts = [g for g in games if g]
    n = len(counts)
    moves = {role: sum(g["moves"].get(role, 0) for g in counts) for role in ROLES}
    legal = {role: sum(g["legal"].get(role, 0) for g in counts) for role in ROLES}
    votes, hits = sum(g["votes"] for g in counts), sum(g["vote_hits"] for g in counts)
    expected, var = sum(g["vote_chance"] for g in counts), sum(g["vote_chance_var"] for g in counts)
    checks, check_hits = sum(g["checks"] for g in counts), sum(g["check_hits"] for g in counts)
    speeches, reveals = sum(g["seer_speeches"] for g in counts), sum(g["seer_reveals"] for g in counts)
    rounds = [float(r) for g in counts for r in g["wolf_rounds"]]
    alive = [bool(a) for g in counts for a in g["wolf_alive"]]
    winners = [g["winner"] for g in counts]
    mean, half, wolves = mean_ci(rounds)
    out: dict[str, Any] = {
        "games": n,
        "wins": {side: rate(winners.count(side), n) for side in (VILLAGE, "werewolves")},
        "draws": rate(winners.count(DRAW), n),
        "legal": {"all": rate(sum(legal.values()), sum(moves.values())),
                  **{role: rate(legal[role], moves[role]) for role in ROLES if moves[role]}},
        # counts kept before ballots were counted have none: the cast share is over the games that have them
        "village_cast": rate(sum(g["votes"] for g in counts if "ballots" in g),
                             sum(g.get("ballots", 0) for g in counts)),
        "village_votes": {**rate(hits, votes), "chance": expected / votes if votes else None,
                          "z": (hits - expected) / math.sqrt(var) if var > 0 else None},
        "seer_checks": {**rate(check_hits, checks), "chance": sum(g["check_chance"] for g in counts) / checks
                        if checks else None},
        "seer_reveals": rate(reveals, speeches),
        "wolf_survived": rate(sum(alive), len(alive)),
        "wolf_rounds": {"mean": mean, "ci95": half, "n": wolves},
    }
    out["per_game"] = {"legal moves": sum(moves.values()) / n if n else 0.0, "village votes": votes / n if n else 0.0,
                       "seer checks": checks / n if n else 0.0, "seer reveals": speeches / n if n else 0.0,
                       "werewolves": len(alive) / n if n else 0.0, "games": 1.0 if n else 0.0}
    return out


def games_for_half_width(summary: Mapping[str, Any], half: float = 0.2) -> dict[str, int | None]:
    """Games each pooled signal needs for a 95% interval within ±``half`` at any rate, at the units a game gave here
    (None where no game gave one)."""
    need = units_for_half_width(half)
    return {name: math.ceil(need / per) if per else None for name, per in summary["per_game"].items()}


def _cell(entry: Mapping[str, Any] | None) -> str:
    if not entry or entry.get("rate") is None:
        return "-"
    lo, hi = entry["ci95"]
    return f"{entry['rate']:.2f} [{lo:.2f}, {hi:.2f}] ({entry['hits']:g}/{entry['n']})"


def signals_table(rows: Iterable[tuple[str, Mapping[str, Any]]]) -> str:
    """Render ``(setting, summarise_signals(...))`` rows as a Markdown table: rates [95% CI] (hits/n)."""
    head = ["setting", "games", "legal moves", *[f"legal: {r}" for r in ROLES], "village votes cast",
            "village votes on a werewolf (chance; z)", "seer checks of a werewolf (chance)", "seer reveals",
            "werewolf alive at the end", "werewolf rounds survived", "village wins", "draws"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for setting, s in rows:
        votes, checks, rounds = s["village_votes"], s["seer_checks"], s["wolf_rounds"]
        extra = (f" ({votes['chance']:.2f}; z {votes['z']:.1f})" if votes.get("z") is not None else
                 f" ({votes['chance']:.2f})" if votes.get("chance") is not None else "")
        seen = f" ({checks['chance']:.2f})" if checks.get("chance") is not None else ""
        survived = "-" if rounds["mean"] is None else f"{rounds['mean']:.2f}" + (
            f" ± {rounds['ci95']:.2f}" if rounds["ci95"] is not None else "") + f" (n={rounds['n']})"
        cells = [setting, str(s["games"]), _cell(s["legal"]["all"]), *[_cell(s["legal"].get(r)) for r in ROLES],
                 _cell(s["village_cast"]), _cell(votes) + extra, _cell(checks) + seen, _cell(s["seer_reveals"]),
                 _cell(s["wolf_survived"]), survived, _cell(s["wins"]["village"]), _cell(s["draws"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
