"""Scripted game players for tests: strategies, as deciders (in-process) and as chat-model responders.

A strategy maps (seat, phase, legal options, roles) to (target, text). `decider` plays it through
`swm.games.play_game`; `responder` plays it through a `ScriptedChatModel`, reading the seat, the
phase and the options from the prompt the moderator rendered, as a model would. Run as a script
(``python games_scripted.py DB THREAD KILL_AT``) it plays a game on a SQLite checkpoint and kills
its own process with SIGKILL at model call KILL_AT.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Callable
from typing import Any

from swm.games import Decision, Turn

Strategy = Callable[[str, str, list[str], dict[str, str]], tuple[str | None, str]]
_AGENT = re.compile(r'<data name="your name">\n(\S+)\n')
_OPTIONS = re.compile(r"Reply with the field `target`: one of (.+?)(?: or none to abstain)?\.(?: Add|\s*$)", re.M)
PHASE_WORDS = {"Pick tonight's victim": "night_wolves", "As the seer": "night_seer", "As the doctor": "night_doctor",
               "Your turn to speak": "day_speak", "Vote to eliminate": "day_vote"}


def wolves(roles: dict[str, str]) -> list[str]:
    return [p for p, r in roles.items() if r == "werewolf"]


def village_finds_wolves(seat: str, phase: str, options: list[str], roles: dict[str, str]) -> tuple[str | None, str]:
    """Werewolves kill the first option; the village votes for a werewolf; the doctor protects itself."""
    pack = wolves(roles)
    if phase == "night_wolves":
        return options[0], f"NIGHTMSG-{seat}: let us take {options[0]}"
    if phase == "night_doctor":
        return seat, ""
    if phase == "day_speak":
        return None, f"I am {seat} and I am innocent."
    if phase == "day_vote":
        if seat in pack:
            return next(o for o in options if o not in pack), ""
        return next((o for o in options if o in pack), options[0]), ""
    return options[0], ""


def village_errs(seat: str, phase: str, options: list[str], roles: dict[str, str]) -> tuple[str | None, str]:
    """As above, but everyone votes for the first non-werewolf: the village eliminates its own."""
    if phase == "day_vote":
        return next(o for o in options if o not in wolves(roles)), ""
    return village_finds_wolves(seat, phase, options, roles)


def decider(strategy: Strategy) -> Callable[[Turn], Decision]:
    def decide(turn: Turn) -> Decision:
        target, text = strategy(turn.request.agent, turn.request.phase, list(turn.request.options), turn.state.roles)
        return Decision(target=target, text=text)

    return decide


def parse_prompt(prompt: str) -> tuple[str, str, list[str]]:
    """Return (seat, phase, options) as a model would read them from the moderator's prompt."""
    seat = _AGENT.search(prompt)
    asked = prompt.split("The moderator asks you:", 1)[1]
    phase = next(p for word, p in PHASE_WORDS.items() if word in asked)
    found = _OPTIONS.search(asked)
    options = [o.strip() for o in found.group(1).split(",")] if found else []
    assert seat is not None
    return seat.group(1), phase, options


def responder(strategy: Strategy, roles: dict[str, str],
              kill_at: int | None = None) -> Callable[[str, str | None], Any]:
    """Answer GameMove tool calls by the strategy; at call ``kill_at`` the process dies with SIGKILL."""
    count = {"n": 0}

    def respond(prompt: str, tool: str | None) -> Any:
        count["n"] += 1
        if kill_at is not None and count["n"] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        seat, phase, options = parse_prompt(prompt)
        target, text = strategy(seat, phase, options, roles)
        from swm.testing import as_structured

        if phase == "day_speak":
            return as_structured({"say": text}, "GameMove")
        args: dict[str, Any] = {"target": target or "none"}
        if "Add `say`" in prompt:  # a werewolf's pick carries a message to the pack
            args["say"] = text
        return as_structured(args, "GameMove")

    return respond


def run_game_process(db: str, thread: str, kill_at: int, seed: int) -> None:
    """Play a werewolf game on a SQLite checkpoint and experience store; die at model call ``kill_at``."""
    from swm.checkpoints import ExperienceStore, run_thread, sqlite_saver
    from swm.context import SWMContext
    from swm.games import default_players, get_game
    from swm.graphs.game import build
    from swm.testing import ScriptedChatModel

    roles = get_game("werewolf").deal(default_players(6), seed).roles
    llm = ScriptedChatModel(respond=responder(village_finds_wolves, roles, kill_at))
    ctx = SWMContext(llm=llm, store=ExperienceStore(db))
    with sqlite_saver(db) as saver:
        run_thread(build().compile(checkpointer=saver), {"game_id": thread, "seed": seed}, {"configurable":
                   {"thread_id": thread}}, ctx)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    run_game_process(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
