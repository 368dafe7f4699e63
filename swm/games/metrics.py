"""The game benchmark's numbers, computed from finished `GameRecord`s only (no model, no judge).

* **Win rate per side** (and draws) with a 95% Wilson interval over games.
* **Vote accuracy**: the share of the village side's cast day votes (abstentions left out) that
  named a werewolf, with its Wilson interval, beside the **chance** rate of the same votes
  (the mean, over those votes, of werewolves among the voter's legal options).
* **Seer usefulness**: the share of the seer's checks that found a werewolf (``seer_hit_rate``;
  chance beside it), and the share of werewolves so found that a later day vote eliminated
  (``seer_followup``).
* **Illegal-action rate**: violations per move decided by a model (the random baseline cannot
  make one), with the count of each violation code.
* **Turns** (moves) and **rounds per game**, **calls** and **tokens per game**: mean ± 95% t-interval.

Votes within a game are not independent, so the vote interval is narrower than the truth; the
win-rate interval (one outcome per game) is the one to compare policies by.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from swm.games.base import DRAW
from swm.games.records import GameRecord
from swm.stats import format_ci, mean_ci, wilson_interval


def _rate(hits: float, n: int) -> dict[str, Any]:
    lo, hi = wilson_interval(hits, n)
    return {"rate": hits / n if n else None, "ci95": [round(lo, 4), round(hi, 4)], "n": n, "hits": hits}


def _mean(values: Iterable[float]) -> dict[str, Any]:
    mean, half, n = mean_ci(list(values))
    return {"mean": mean, "ci95": half, "n": n}


def wolf_roles(record: GameRecord) -> set[str]:
    """Return the seats of the side that is not the village's (the hidden side)."""
    return {p for p, side in record.sides.items() if side != "village"}


def summarise_games(records: list[GameRecord], sides: Iterable[str]) -> dict[str, Any]:
    """Return the metrics of one group of finished games (see the module docstring)."""
    done = [r for r in records if r.outcome is not None]
    n = len(done)
    winners = Counter(r.outcome.winner for r in done if r.outcome is not None)
    out: dict[str, Any] = {"games": n, "wins": {side: _rate(winners.get(side, 0), n) for side in sides},
                           "draws": _rate(winners.get(DRAW, 0), n)}
    votes = hits = 0
    chance = 0.0
    checks = check_hits = 0
    check_chance = 0.0
    found = followed = 0
    model_moves = violations = 0
    codes: Counter[str] = Counter()
    for r in done:
        hidden = wolf_roles(r)
        seen_wolves: list[tuple[int, str]] = []
        for m in r.moves:
            if m.policy != "random":
                model_moves += 1
                if m.violation:
                    violations += 1
                    codes[m.violation] += 1
            if m.phase == "day_vote" and r.sides[m.agent] == "village" and m.target is not None:
                votes += 1
                hits += m.target in hidden
                chance += sum(o in hidden for o in m.options) / len(m.options) if m.options else 0.0
            if m.events.get("checked") is not None:
                checks += 1
                check_hits += bool(m.events.get("is_werewolf"))
                check_chance += sum(o in hidden for o in m.options) / len(m.options) if m.options else 0.0
                if m.events.get("is_werewolf"):
                    seen_wolves.append((m.turn, m.events["checked"]))
        for turn, wolf in dict((w, (t, w)) for t, w in seen_wolves).values():
            found += 1
            followed += any(m.events.get("eliminated") == wolf for m in r.moves if m.turn > turn)
    out["vote_accuracy"] = {**_rate(hits, votes), "chance": chance / votes if votes else None}
    out["seer_hit_rate"] = {**_rate(check_hits, checks), "chance": check_chance / checks if checks else None}
    out["seer_followup"] = _rate(followed, found)
    out["illegal_rate"] = {**_rate(violations, model_moves), "codes": dict(codes)}
    out["turns_per_game"] = _mean(len(r.moves) for r in done)
    out["rounds_per_game"] = _mean(r.outcome.round for r in done if r.outcome is not None)
    out["calls_per_game"] = _mean(sum(m.calls for m in r.moves) for r in done)
    out["tokens_per_game"] = _mean(sum(m.prompt_tokens + m.completion_tokens for m in r.moves) for r in done)
    return out


def _pct(entry: dict[str, Any]) -> str:
    if entry["rate"] is None:
        return "n/a"
    lo, hi = entry["ci95"]
    return f"{entry['rate']:.2f} [{lo:.2f}, {hi:.2f}]"


def markdown(table: list[dict[str, Any]], sides: list[str]) -> str:
    """Render one row per policy setting as a Markdown table."""
    head = ["setting", "games", *[f"{s} win [95% CI]" for s in sides], "draws", "vote acc. (chance)",
            "seer hits (chance)", "seer follow-up", "illegal rate", "turns/game", "rounds/game", "calls/game",
            "tokens/game"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in table:
        m = row["metrics"]
        chance = m["vote_accuracy"]["chance"]
        seer_chance = m["seer_hit_rate"]["chance"]
        cells = [row["setting"], str(m["games"]), *[_pct(m["wins"][s]) for s in sides], _pct(m["draws"]),
                 _pct(m["vote_accuracy"]) + (f" ({chance:.2f})" if chance is not None else ""),
                 _pct(m["seer_hit_rate"]) + (f" ({seer_chance:.2f})" if seer_chance is not None else ""),
                 _pct(m["seer_followup"]), _pct(m["illegal_rate"]),
                 *[format_ci(m[k]["mean"], m[k]["ci95"], 1) for k in
                   ("turns_per_game", "rounds_per_game", "calls_per_game", "tokens_per_game")]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
