"""The general interface: a second hidden-role game is one module, played by the unchanged graph and loop.

``secret_word`` (a tiny Spyfall): every insider knows the secret word, the spy does not. Each
player gives one clue, then everyone votes; the insiders win if the spy is the most-voted player
alone, the spy wins otherwise. Defined here, registered, and played by `graphs.game` and
`swm.games.play_game` with no change to either.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

from pydantic import Field

from swm.checkpoints import ExperienceStore
from swm.context import SWMContext
from swm.games import (
    Applied,
    Decision,
    GameState,
    HiddenRoleGame,
    Move,
    Outcome,
    Request,
    Turn,
    play_game,
    register_game,
)
from swm.games.store import load_moves
from swm.games.werewolf import vote_result
from swm.graphs.game import build
from swm.selfplay.game_rollout import play_game_rollout
from swm.state import SocialStep
from swm.tasks.verdicts import Utterance
from swm.testing import ScriptedChatModel, as_structured
from swm.training.trajectory import Generation

ROOT = Path(__file__).resolve().parents[1]


class WordState(GameState):
    word: str
    queue: list[str] = Field(default_factory=list)
    votes: dict[str, str | None] = Field(default_factory=dict)


class SecretWord(HiddenRoleGame):
    name = "secret_word"
    sides = ("insiders", "spy")
    min_players = 3
    max_players = 6
    state_type = WordState

    def deal(self, players: list[str], seed: int, options: dict[str, Any] | None = None) -> WordState:
        rng = random.Random(seed)
        spy = rng.choice(players)
        word = rng.choice(["lighthouse", "volcano", "submarine"])
        return WordState(game=self.name, seed=seed, players=players, alive=list(players), phase="clue", word=word,
                         roles={p: "spy" if p == spy else "insider" for p in players}, queue=list(players))

    def side_of(self, state: GameState, seat: str) -> str:
        return "spy" if state.roles[seat] == "spy" else "insiders"

    def rules(self, state: GameState) -> str:
        return "One of you is the spy and does not know the secret word. Give a clue, then vote out the spy."

    def briefing(self, state: GameState) -> SocialStep:
        assert isinstance(state, WordState)
        seen = {p: "You are the spy: you do not know the word." if state.roles[p] == "spy" else
                f"The secret word is {state.word}." for p in state.players}
        return SocialStep(timestep="setup", observations=seen)

    def request(self, state: GameState) -> Request | None:
        assert isinstance(state, WordState)
        if state.over or not state.queue:
            return None
        seat = state.queue[0]
        if state.phase == "clue":
            return Request(agent=seat, phase="clue", kind="speak", instruction="Give a one-word clue.")
        others = [p for p in state.players if p != seat]
        return Request(agent=seat, phase="vote", kind="choose", options=others, allow_abstain=True,
                       instruction=f"Vote for the spy among: {', '.join(others)}.")

    def apply(self, state: GameState, request: Request, move: Move) -> Applied:
        assert isinstance(state, WordState)
        s = state.model_copy(deep=True)
        s.queue.pop(0)
        seen: dict[str, str] = {}
        if s.phase == "clue":
            seen = {p: f'{move.agent} gave the clue "{move.text}".' for p in s.players}
            if not s.queue:
                s.phase, s.queue = "vote", list(s.players)
        else:
            s.votes[move.agent] = move.target
            if not s.queue:
                out, _ = vote_result(s.votes)
                spy = next(p for p, r in s.roles.items() if r == "spy")
                winner = "insiders" if out == spy else "spy"
                s.phase = "over"
                s.outcome = Outcome(winner=winner, reason=f"{out or 'nobody'} was voted out", round=1,
                                    roles=dict(s.roles), sides={p: self.side_of(s, p) for p in s.players})
                seen = {p: f"{out or 'Nobody'} was voted out; the {winner} win." for p in s.players}
        return Applied(state=s, step=SocialStep(timestep="", observations=seen, actions={move.agent: move.text}))


GAME = register_game(SecretWord())


def _spy(roles: dict[str, str]) -> str:
    return next(p for p, r in roles.items() if r == "spy")


def test_the_test_game_plays_in_process_with_per_seat_rewards() -> None:
    def decide(turn: Turn) -> Decision:
        if turn.request.kind == "speak":
            return Decision(text="water")
        return Decision(target=_spy(turn.state.roles) if turn.side == "insiders" else turn.request.options[0])

    record = play_game("secret_word", decide, seed=5, players=["Ann", "Bo", "Cy", "Di"])
    assert record.outcome is not None and record.outcome.winner == "insiders"
    spy = _spy(record.roles)
    assert record.rewards()[spy] == -1.0 and sum(record.rewards().values()) == 2.0
    assert len(record.moves) == 8


def test_the_unchanged_game_graph_plays_it_and_keeps_the_word_from_the_spy() -> None:
    players = ["Ann", "Bo", "Cy", "Di"]
    roles = GAME.deal(players, 3).roles
    spy = _spy(roles)

    def respond(prompt: str, tool: str | None) -> Any:
        seat = re.search(r'<data name="your name">\n(\S+)\n', prompt)
        assert seat is not None
        if "one-word clue" in prompt:
            return as_structured({"say": "tide"}, "GameMove")
        target = spy if seat.group(1) != spy else "Nobody-at-all"  # no player: the schema's enum refuses it
        return as_structured({"target": target}, "GameMove")

    llm = ScriptedChatModel(respond=respond)
    store = ExperienceStore(":memory:")
    out = build().compile().invoke({"game": "secret_word", "game_id": "w", "seed": 3, "players": players},
                                   context=SWMContext(llm=llm, store=store))
    assert out["outcome"]["winner"] == "insiders" and out["per_role"][spy]["reward"] == -1.0
    word = GAME.deal(players, 3).word
    for _, prompt in llm.prompts:
        mine = re.search(r'<data name="your name">\n(\S+)\n', prompt)
        assert mine is not None
        assert (word in prompt) == (mine.group(1) != spy)
    moves = load_moves(store, "w")
    assert [m.violation for m in moves if m.agent == spy and m.kind == "choose"] == ["malformed"]


def test_the_graph_nodes_and_moderator_know_no_rules_of_a_game() -> None:
    for path in ("graphs/game.py", "nodes/game.py", "swm/games/moderator.py", "swm/games/play.py"):
        text = (ROOT / path).read_text().lower()
        assert "games.werewolf" not in text, path
        assert not re.search(r"\b(seer|doctor|night|villager|spy|insider)s?\b", text), path


def test_a_registered_game_is_a_task_family_checked_for_its_own_completing_side() -> None:
    """A game is one module and its row: registered, it is a task family (`is_game`) dealt at each level, replayed
    by the moderator with completion on its completing side (here the insiders, the first side), and offered by
    `swm selfplay --game`, with no change anywhere else."""
    from swm.commands.selfplay_cmd import selfplay_command as selfplay
    from swm.tasks.families import is_game, synthesize
    from swm.tasks.verify import check

    assert is_game("secret_word") and not is_game("negotiation")
    task = synthesize("secret_word", "easy", 1)
    assert task.truth["game"] == "secret_word" and len(task.truth["players"]) == SecretWord.min_players
    spy = _spy(task.truth["roles"])
    players = task.truth["players"]
    clues = [Utterance(agent=p, text="red", action_type="speak") for p in players]
    for voted, insiders_win in ((spy, True), (next(p for p in players if p != spy), False)):
        votes = [Utterance(agent=p, text=voted if p != voted else next(q for q in players if q != p),
                           action_type="choose") for p in players]
        verdict = check(task, clues + votes)
        assert verdict.resolved_at is not None and verdict.completion is insiders_win, verdict
    param = next(p for p in selfplay.params if p.name == "game")
    assert param.type.convert("secret_word", param, None) == "secret_word"


class Clue:
    """Says one word at every request: a clue, and a vote naming nobody (an abstention)."""

    def generate(self, prompt: str) -> Generation:
        return Generation(text="water", prompt_ids=[1], token_ids=[5], logprobs=[-0.5])


def test_a_game_that_declares_no_signals_has_none() -> None:
    """Signals are a column of the game's row (`HiddenRoleGame.signals`): self-play keeps what the row counts, here
    nothing, rather than Werewolf's counts over another game's moves."""
    rollout = play_game_rollout("secret_word", Clue(), seed=2, players=4, options={}, rollout_id="s/g0",
                                task_id="secret_word:train:2", iteration=0, sample=0, illegal="filter")
    assert rollout.failed is None and rollout.verdict is not None and rollout.verdict["winner"] == "spy"
    assert rollout.verdict["signals"] == {} and GAME.pool_signals([rollout.verdict["signals"]]) is None
