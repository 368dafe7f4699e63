"""Verifiable social tasks: five families at three difficulty levels, with hidden ground truth.

`synthesize(family, level, seed)` is a pure function of its arguments (``random.Random`` seeded
with a string is stable across processes), so a task id names its content. Each task keeps what
the agents are told (the public ``scenario``, each agent's private ``goal`` and ``private``
facts) apart from what only the checker sees (``truth``). The checkers in
`swm.tasks.checkers` read a transcript and the truth, never a judge.

The protocol every family shares, written into each scenario so agents can follow it:

* an offer names a price as ``$N`` (negotiation) or a slot as ``Mon 14:00`` (scheduling);
* agreement is the literal capitalised word ``ACCEPT`` (case-sensitive, so "I accept that you..."
  in passing does not count);
* an answer is ``ANSWER: First Last`` (mutual friend).

Levels raise difficulty along named axes: ``easy`` (two agents, wide margins, few distractors,
a cooperative partner), ``medium`` (tighter zones, more distractors, a pressing partner),
``hard`` (a third agent or near-duplicate distractors, the tightest zones, a deceptive partner).

Two switches of the generator (`Variant`) change what a task is drawn from, never its shape:

* the **name pool** people are drawn from: ``shared`` (every first × last name, the generator as it
  was first written), ``train`` and ``eval`` (two disjoint halves of it: alternate first and last
  names), or ``unseen`` (first and last names that no other pool holds);
* the **friend-list length** of mutual-friend tasks (``friends=(8, 10)``: each list's length drawn
  from 8–10, the shared friend included), in place of the level's own.

A task drawn with the defaults (shared pool, the level's lists) has the id and content it always
had; any other variant is named in its id (``split:family:level:seed:names=eval``), its seed string
and its ``generator`` (``tasks@v1+names=eval``), so an id still names its content (`task_of_id`).
Which variant a split's tasks take is `variant_for`: by default (``names="disjoint"``) decision and
two-turn tasks draw training names from the ``train`` pool and dev/test names from the ``eval`` pool;
``names="shared"`` is the generator before the switch (the splits measured before 2026-11-26). Two-seat
and multi-turn tasks follow the same policy (two-seat tasks kept the shared pool until 2026-11-28: the
results measured before then used it); the episode levels read frozen files and keep the shared pool.
"""

from __future__ import annotations

import difflib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from swm import prompts
from swm.games import GAMES, game_names, get_game
from swm.tables import Names, Table
from swm.tasks.verdicts import Utterance, Verdict

FAMILIES = ("negotiation", "mutual_friend", "secret", "scheduling", "persuasion")
# Hidden-role games (swm.games): played by the game graph, checked by replaying the moves through the
# code moderator. Not in the default families nor in the frozen held-out file: a game task is a deal. Every
# registered game is a task family (`is_game`: a game registered after this import counts too); these are the
# games registered when swm.tasks was imported (the shipped ones).
GAME_FAMILIES = game_names()
TASK_FAMILIES = FAMILIES + GAME_FAMILIES


def is_game(family: str) -> bool:
    """Whether a task family is a registered hidden-role game (its row: `swm.games.HiddenRoleGame`)."""
    return family in GAMES or family in game_names()


def task_families() -> tuple[str, ...]:
    """Return every task family a curriculum may name now: the lifelong families' rows (`FAMILY_ROWS`: the shipped
    `FAMILIES`, then any registered since), then the registered games (so a game registered after this import
    counts)."""
    return (*FAMILY_ROWS.names(), *game_names())


def known_family(family: str) -> str:
    """Return ``family`` if it is a task family now; else fail in one line naming the families (and the closest)."""
    known = task_families()
    if family not in known:
        close = difflib.get_close_matches(family, known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown task family {family!r}{hint}; the families are {', '.join(known)}")
    return family


# a task family's name as a model field holds it (the lifelong plan's): checked, offered by the CLI and listed in the
# JSON schema from `task_families` when each is asked, never typed out
TaskFamily = Annotated[str, AfterValidator(known_family), Names(task_families)]

LEVELS = ("easy", "medium", "hard")
# every level a curriculum may name: single decisions (swm.tasks.decisions) and two-turn exchanges with a
# code partner (swm.tasks.two_turn) below the episode levels
DECISION = "decision"
TWO_TURN = "two-turn"
# one model plays every seat of a short exchange, checked by code (swm.tasks.two_seat; swm selfplay only)
TWO_SEAT = "two-seat"
# the same, over a conversation of several turns where one message cannot say it all (swm.tasks.multi_turn, which
# also registers the shorter horizons ``multi-turn-4`` and ``multi-turn-6``); every level one model plays in all
# seats is a row of `swm.tasks.levels.LEVEL_ROWS` (`seat_levels`)
MULTI_TURN = "multi-turn"
# an episode level below easy, for a curriculum that cannot climb from two-turn to easy episodes: shorter (the
# level's own turn limit) and one rule fewer (negotiation's private limits may be said); generated, never frozen
STARTER = "starter"
GENERATOR_VERSION = "tasks@v1"
ACCEPT = "ACCEPT"

FIRST = ["Ava", "Ben", "Cara", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivan", "Jade", "Kai", "Lena", "Milo",
         "Nia", "Omar", "Pia", "Quinn", "Rosa", "Sami", "Tara", "Uma", "Vic", "Wes", "Yara", "Zoe"]
LAST = ["Adler", "Brook", "Chen", "Diaz", "Evans", "Ford", "Garcia", "Hughes", "Ito", "Jensen", "Khan",
        "Lopez", "Moreau", "Novak", "Okafor", "Patel", "Quist", "Rossi", "Silva", "Tanaka"]
# a pool the other pools never draw from: names the generator's other splits never use
UNSEEN_FIRST = ["Abel", "Bryn", "Cyra", "Dario", "Edda", "Finn", "Greta", "Hugo", "Ines", "Joel", "Kira", "Luca",
                "Mara", "Nils", "Odette", "Pavel", "Rhea", "Soren", "Thea", "Ugo", "Vera", "Wren", "Xavi", "Yusuf",
                "Zelda"]
UNSEEN_LAST = ["Almeida", "Bauer", "Costa", "Dubois", "Eriksen", "Fischer", "Gallo", "Horvat", "Iqbal", "Juarez",
               "Kowalski", "Larsen", "Mendes", "Nakamura", "Oliveira", "Petrov", "Reyes", "Schmidt", "Torres", "Varga"]
NAME_POOLS: dict[str, tuple[list[str], list[str]]] = {
    "shared": (FIRST, LAST), "train": (FIRST[0::2], LAST[0::2]), "eval": (FIRST[1::2], LAST[1::2]),
    "unseen": (UNSEEN_FIRST, UNSEEN_LAST)}
# how a run's decision and two-turn splits take their names: training and dev/test from disjoint pools, or all
# from the shared one (the splits before the switch); episode levels (frozen files) and two-seat keep the shared pool
NAME_POLICIES = ("disjoint", "shared")
# the test split's shifted cells, each a variant of its tasks: names from the unseen pool; 8-10 friends a list
SHIFTS = ("unseen-names", "long-lists")
SHIFT_FAMILIES = {"unseen-names": ("negotiation", "mutual_friend", "secret", "scheduling", "persuasion"),
                  "long-lists": ("mutual_friend",)}
LONG_LISTS = (8, 10)
ITEMS = [("a used road bike", 420), ("a vintage guitar", 760), ("a sofa", 310), ("a laptop", 890),
         ("a camera kit", 540), ("a rowing machine", 380), ("a drone", 650), ("a telescope", 470)]
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri")
HOURS = (9, 10, 11, 13, 14, 15, 16)
SECRETS = [("a surprise party for {name}", ["Friday", "Luigi's", "8pm"]),
           ("{name}'s job offer from a rival firm", ["Northwind", "March", "raise"]),
           ("the plan to sell the family cabin", ["cabin", "June", "Tahoe"]),
           ("{name}'s engagement", ["ring", "Saturday", "Lisbon"])]
OBJECTIONS = {
    "cost": ["cost", "price", "money", "afford", "expensive", "fee"],
    "time": ["time", "busy", "schedule", "hours", "weekend"],
    "safety": ["safe", "safety", "risk", "injury", "danger"],
    "skill": ["beginner", "skill", "experience", "learn", "lessons"],
}
CAUSES = ["join the weekend climbing club", "volunteer at the food bank", "take the evening pottery class",
          "sign up for the charity run", "join the community choir"]

LEVEL_KNOBS: dict[str, dict[str, Any]] = {
    STARTER: {"zone": 0.45, "list": 3, "agents": 2, "common": 4, "facts": 1, "partner": "cooperative", "turns": 4,
              "leak_rule": False},
    "easy": {"zone": 0.30, "list": 4, "agents": 2, "common": 3, "facts": 1, "partner": "cooperative"},
    "medium": {"zone": 0.15, "list": 6, "agents": 2, "common": 2, "facts": 2, "partner": "pressing"},
    "hard": {"zone": 0.05, "list": 6, "agents": 3, "common": 1, "facts": 3, "partner": "deceptive"},
}


class AgentBrief(BaseModel):
    """One seat of a task: what this agent is told privately, and what is checked about it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    role: str
    goal: str = Field(description="the private goal, shown only to this agent")
    private: str = Field(default="", description="private facts, shown only to this agent")
    key_facts: list[str] = Field(default_factory=list,
                                 description="hidden truth a partner's prediction of this agent is checked against")
    forbidden: list[str] = Field(default_factory=list, description="strings this agent must never say (leaks)")


class Task(BaseModel):
    """A synthesised social task with hidden ground truth for its checker."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    family: str
    level: str
    seed: int
    split: str = "train"  # train | heldout (the test split) | dev
    scenario: str
    agents: list[AgentBrief]
    truth: dict[str, Any]
    generator: str = GENERATOR_VERSION

    def agent(self, name: str) -> AgentBrief:
        for brief in self.agents:
            if brief.name == name:
                return brief
        raise KeyError(f"task {self.task_id} has no agent {name!r}")

    @property
    def names(self) -> list[str]:
        return [a.name for a in self.agents]


@dataclass(frozen=True)
class Variant:
    """The generator's switches: the name pool people are drawn from, and mutual friend's list length.

    The defaults are the generator as first written: a task drawn with them keeps its id and content.
    """

    names: str = "shared"
    friends: tuple[int, int] | None = None  # each friend list's length (shared friend included), drawn in range

    def __post_init__(self) -> None:
        if self.names not in NAME_POOLS:
            raise ValueError(f"unknown name pool {self.names!r}; pools are {', '.join(NAME_POOLS)}")
        if self.friends is not None and not 2 <= self.friends[0] <= self.friends[1]:
            raise ValueError(f"friend-list lengths {self.friends} must be a range of at least 2")

    @property
    def tag(self) -> str:
        """Return how the variant is named in a task's id ('' for the defaults)."""
        parts = [f"names={self.names}"] if self.names != "shared" else []
        if self.friends is not None:
            parts.append(f"friends={self.friends[0]}-{self.friends[1]}")
        return ",".join(parts)

    @classmethod
    def parse(cls, tag: str) -> Variant:
        """Return the variant a task id's tag names."""
        fields = dict(part.split("=", 1) for part in tag.split(",") if part)
        friends = fields.get("friends")
        low, _, high = (friends or "").partition("-")
        return cls(names=fields.get("names", "shared"), friends=(int(low), int(high)) if friends else None)

    def people(self, rng: random.Random, n: int, taken: set[str] | None = None) -> list[str]:
        """Draw ``n`` distinct people's full names from the variant's pool."""
        first_names, last_names = NAME_POOLS[self.names]
        taken = set(taken or ())
        out: list[str] = []
        while len(out) < n:
            name = f"{rng.choice(first_names)} {rng.choice(last_names)}"
            if name not in taken:
                taken.add(name)
                out.append(name)
        return out


SHARED = Variant()


def variant_for(level: str, split: str, names: str = "disjoint", shift: str | None = None) -> Variant:
    """Return the variant of a split's tasks at a level: its name policy's pool, then the shift's change.

    ``split`` is the generator's (``train``, ``heldout``, ``dev``). With ``names="disjoint"`` decision, two-turn,
    two-seat and multi-turn tasks draw from the ``train`` pool in training and the ``eval`` pool otherwise;
    everything else (episode levels, games) keeps the shared pool. A shift (`SHIFTS`) draws names from the unseen pool
    or lists of `LONG_LISTS` friends.
    """
    if names not in NAME_POLICIES:
        raise ValueError(f"unknown name policy {names!r}; policies are {', '.join(NAME_POLICIES)}")
    pool = "shared"
    if names == "disjoint" and level in LEVEL_ROWS:  # every generated level: decision, two-turn, the seat levels
        pool = "train" if split == "train" else "eval"
    if shift is None:
        return Variant(names=pool)
    if shift == "unseen-names":
        return Variant(names="unseen")
    if shift == "long-lists":
        return Variant(names=pool, friends=LONG_LISTS)
    raise ValueError(f"unknown shift {shift!r}; shifts are {', '.join(SHIFTS)}")


def turn_limit(level: str, max_turns: int) -> int:
    """Return an episode's turn limit at ``level``: ``max_turns``, or the level's own when shorter (starter)."""
    return min(max_turns, LEVEL_KNOBS.get(level, {}).get("turns", max_turns))


def task_id(family: str, level: str, seed: int, split: str = "train", variant: Variant = SHARED) -> str:
    base = f"{split}:{family}:{level}:{seed}"
    return f"{base}:{variant.tag}" if variant.tag else base


def parse_task_id(value: str) -> tuple[str, str, str, int, Variant]:
    """Return a task id's split, family, level, seed and variant."""
    split, family, level, seed, *tag = value.split(":")
    return split, family, level, int(seed), Variant.parse(tag[0] if tag else "")


def task_of_id(value: str) -> Task:
    """Generate the task an id names."""
    split, family, level, seed, variant = parse_task_id(value)
    return synthesize(family, level, seed, split=split, variant=variant)


def _seed_string(split: str, family: str, level: str, seed: int, variant: Variant) -> str:
    base = f"{GENERATOR_VERSION}|{split}|{family}|{level}|{seed}"
    return f"{base}|{variant.tag}" if variant.tag else base


def _generator(variant: Variant) -> str:
    return f"{GENERATOR_VERSION}+{variant.tag}" if variant.tag else GENERATOR_VERSION


def _slot(day: str, hour: int) -> str:
    return f"{day} {hour:02d}:00"


GAME_MAX_ROUNDS = 4


def game_deal(name: str, rng: random.Random, level: str, variant: Variant = SHARED) -> dict[str, Any]:
    """A deal of game ``name``: the seats (`HiddenRoleGame.players_at` the level), their hidden roles, the deal's
    seed. Played by the game graph, not the episode graph; any registered game is dealt the same way."""
    game = get_game(name)
    seats = game.players_at(level)
    players = [person.split()[0] for person in variant.people(rng, seats)]
    while len(set(players)) < len(players):  # first names are the seats; a repeated one is drawn again
        players = [person.split()[0] for person in variant.people(rng, seats)]
    deal_seed = rng.randrange(1_000_000)
    options = {"max_rounds": GAME_MAX_ROUNDS}
    state = game.deal(players, deal_seed, options)
    briefing = game.briefing(state)
    agents = [AgentBrief(name=p, role=state.roles[p],
                         goal=f"Win the game of {name} for the {game.side_of(state, p)}.",
                         private=briefing.observation_of(p), key_facts=[state.roles[p]])
              for p in players]
    scenario = f"A game of {name} with {', '.join(players)}, moderated by code. {game.rules(state)}"
    return {"scenario": scenario, "agents": agents,
            "truth": {"game": name, "deal_seed": deal_seed, "players": players, "options": dict(state.options),
                      "roles": dict(state.roles)}}


Generate = Callable[[random.Random, str, Variant], dict[str, Any]]


@dataclass(frozen=True)
class Family:
    """A lifelong task family's row: its generator and its episode checker, registered by the family's own module
    (`swm.tasks.shapes`, beside its decision shape): `synthesize`, `swm.tasks.verify.check`, the CLI's choices and
    the conformance suite (tests/test_reward_invariants.py) read it, so a new family is that module and nothing
    else."""

    name: str
    generate: Generate  # (rng, level, variant) -> the task's scenario, agent briefs and truth (a level's knobs:
    # LEVEL_KNOBS)
    check: Callable[[Task, Sequence[Utterance]], Verdict]  # an episode's transcript against the truth, in code
    # a transcript that completes the task (the reward invariants' witness; tests/test_reward_invariants.py holds the
    # shipped families' own)
    reference: Callable[[Task], list[Utterance]] | None = None


# every lifelong task family (swm.tasks.shapes registers the shipped five in `FAMILIES`' order, which the pinned
# splits are generated in; a new family goes after them)
FAMILY_ROWS: Table[Family] = Table("task family")


def register_family(row: Family) -> Family:
    """Add a lifelong task family (its generator and episode checker); its module calls this once."""
    return FAMILY_ROWS.register(row.name, row)


def family_row(family: str) -> Family:
    """Return a lifelong family's row, or fail naming the families there are."""
    return FAMILY_ROWS.row(family)


WORRIES = {"cost": "It sounds expensive, and money is tight.", "time": "I'm so busy, I never have the time.",
           "safety": "I'm worried it isn't safe.", "skill": "I'm a beginner with no experience."}
COVER_WORDS = {"meet at the station at 6pm": "station", "lend you their car on Thursday": "car",
               "help carry chairs tomorrow": "chairs"}


@dataclass(frozen=True)
class FirstMove:
    """What code reads from a two-turn learner's first move (`DecisionShape.first_move`)."""

    ok: bool  # the move the shape asks for was made
    said: str  # the move as the next prompt restates it
    value: Any = None  # the parsed offer or slot
    leaks: list[str] = field(default_factory=list)  # violation codes of a private fact said


@dataclass(frozen=True)
class DecisionShape:
    """One lifelong family's decision and two-turn moves, everything about them in one row of `DECISION_SHAPES`.

    A family's module in `swm.tasks.shapes` registers it (`register_decision_shape`). ``truth(rng, parts)`` is what a
    decision adds to the family's ``easy`` generator state (the learner, the partner and the move's state); the
    decision renders ``prompts/decision_<family>`` with ``decision_values(task)``, its reply forced to start with
    ``decision_reply``'s prefill within its token limit, and ``check`` reads the move. A two-turn task renders
    ``two_turn_<family>_open`` and ``_close`` with ``values(task)`` (the opening also ``opening_values``), reads the
    first move with ``first_move``, answers it with the code partner's ``reply`` and checks the decision against
    ``final_truth`` (the state the first move led to; the task's truth when None). ``answer`` is the prefix a
    decision's answer is given after (``ANSWER:``, ``SLOT:``) where it has one: the reward invariants read it.
    """

    family: str
    truth: Callable[[random.Random, dict[str, Any]], dict[str, Any]]
    decision_values: Callable[[Task], dict[str, Any]]
    decision_reply: tuple[str, int]
    check: Callable[[Task, Sequence[Utterance]], Verdict]
    first_move: Callable[[Task, str], FirstMove]
    reply: Callable[[Task, FirstMove], str]
    values: Callable[[Task], dict[str, Any]]
    opening: tuple[str, int]
    closing: tuple[str, int]
    opening_values: Callable[[Task], dict[str, Any]] | None = None
    final_truth: Callable[[Task, FirstMove], dict[str, Any]] | None = None
    answer: str | None = None


# every lifelong family's decision and two-turn shape (swm.tasks.shapes registers the five, in the order their
# splits are generated in): read by the generator, the prompts, the checkers, the seats env and the invariants
DECISION_SHAPES: Table[DecisionShape] = Table("decision shape")


def register_decision_shape(shape: DecisionShape) -> DecisionShape:
    """Add a family's decision shape to `DECISION_SHAPES` (a second one of the same name is an error); return it."""
    return DECISION_SHAPES.register(shape.family, shape)


def decision_families() -> tuple[str, ...]:
    """Return the families with a decision shape, in registration order."""
    return DECISION_SHAPES.names()


def decision_task(family: str, seed: int, split: str = "train", level: str = DECISION,
                  variant: Variant = SHARED) -> Task:
    """Generate one decision (or two-turn) task: the family's ``easy`` state, the learner and the move in its truth.

    A two-turn task draws from its own seed string, so it is never a decision task's twin.
    """
    shape = DECISION_SHAPES.get(family)
    if shape is None:
        raise ValueError(f"no {level} shape for family {family!r}; its families are {', '.join(decision_families())}")
    rng = random.Random(_seed_string(split, family, level, seed, variant))
    parts = family_row(family).generate(rng, "easy", variant)
    truth = {**parts["truth"], **shape.truth(rng, parts)}
    return Task(task_id=task_id(family, level, seed, split, variant), family=family, level=level, seed=seed,
                split=split, scenario=parts["scenario"], agents=parts["agents"], truth=truth,
                generator=_generator(variant))


@dataclass(frozen=True)
class SeatPrompt:
    """One seat's turn of a two-seat shape: its prompt template, the reply's forced start and its length limit.

    The template fills ``{mine}`` (the seat's own list, one item a line) and ``{partner}``; the finder's also
    ``{said}`` (what the speaker said so far). ``ends_line``: a newline ends the reply (a one-line answer).
    """

    template: str
    prefill: str
    max_tokens: int
    ends_line: bool = False


@dataclass(frozen=True)
class TwoSeatShape:
    """One two-seat family, everything about it in one row of `TWO_SEAT_SHAPES` (`register_two_seat`).

    Seat A (role ``speaker``) holds one list and speaks first; seat B (role ``finder``) holds the other and
    must name the one item both lists share. ``generate(rng, seed, split, variant)`` builds the task from a
    generator seeded with its id, names from ``variant``'s pool (truth: ``lists`` (A's, B's), ``speaker``,
    ``finder`` and the family's own keys);
    ``speak`` and ``find`` are the seats' prompts; ``check`` reads a transcript (only the finder's answers
    count); ``reference`` is a right exchange (the reward invariants' witness: tests/test_reward_invariants.py);
    ``load`` reads a prompt template by name (`swm.prompts.load`, or a test's own).
    """

    family: str
    summary: str  # one line for `swm selfplay --help`: who says what
    generate: Callable[[random.Random, int, str, Variant], Task]
    speak: SeatPrompt
    find: SeatPrompt
    check: Callable[[Task, Sequence[Utterance]], Verdict]
    reference: Callable[[Task], list[Utterance]]
    load: Callable[[str], prompts.Prompt] = prompts.load


# every two-seat family (swm.tasks.two_seat registers mutual_friend and scheduling): one table, read by the
# generator, the seats' prompts, the checker, the CLI's choices and the reward invariants
TWO_SEAT_SHAPES: Table[TwoSeatShape] = Table("two-seat shape")


def register_two_seat(shape: TwoSeatShape) -> TwoSeatShape:
    """Add a two-seat family to `TWO_SEAT_SHAPES` (a second one of the same name is an error); return it."""
    return TWO_SEAT_SHAPES.register(shape.family, shape)


def two_seat_families() -> tuple[str, ...]:
    """Return the registered two-seat families, in registration order."""
    return TWO_SEAT_SHAPES.names()


def two_seat_task(family: str, seed: int, split: str = "train", variant: Variant = SHARED) -> Task:
    """Generate one two-seat task from its shape's generator (`TWO_SEAT_SHAPES`), seeded by (split, family, seed).

    ``variant`` picks the seats' (and friends') name pool; the shared pool keeps the ids and content the
    tasks had before the pools were split.
    """
    shape = TWO_SEAT_SHAPES.get(family)
    if shape is None:
        raise ValueError(f"no {TWO_SEAT} shape for family {family!r}; its families are "
                         f"{', '.join(two_seat_families())}")
    if variant.friends is not None:
        raise ValueError(f"{TWO_SEAT} tasks have four names a list (asked for {variant.tag})")
    tag = f"|{variant.tag}" if variant.tag else ""
    return shape.generate(random.Random(f"{GENERATOR_VERSION}|{split}|{family}|{TWO_SEAT}|{seed}{tag}"), seed, split,
                          variant)


# --- levels as rows: each generated level's generator, checker and seats (`swm.tasks.levels` reads them) ----------

@dataclass(frozen=True)
class DecisionPrompt:
    """What the policy is shown for a decision: the user message and the reply's forced start."""

    name: str  # the prompt template's ``name@version``
    text: str
    prefill: str
    max_tokens: int = 24  # the move's length limit (one line: a name, a slot, a reply of a sentence or two)
    one_line: bool = False  # a newline ends the reply (a multi-turn message)
    # the strings that end the reply (a multi-turn list's item past the cap, a blank line before a turn not its own)
    stop: tuple[str, ...] | None = None


Said = Sequence[tuple[str, str]]  # what was said so far, ``(speaker, text)`` a turn
# how a level is played: one learner move against code (``decision``), a learner's exchange with a code partner
# (``two-turn``; both in `swm learn` and the seats env), or one model in every seat with the level's own prompts
# (``seats``: `swm selfplay`, the seats env)
Play = Literal["decision", "two-turn", "seats"]
PLAYS: tuple[Play, ...] = ("decision", "two-turn", "seats")


@dataclass(frozen=True)
class Level:
    """One generated level: what `synthesize`, `swm.tasks.check`, self-play's rollout and the CLI read of it.

    ``generate(family, seed, split, variant)`` is pure in its arguments (a task id names its content);
    ``families()`` is read when asked, so a family registered later (a two-seat shape) counts. A ``seats`` level
    gives ``seat_prompt`` (a seat's first prompt, and the form of every later one), and may give ``follow_up`` (a
    later turn's message in the seat's append-only chat; without it, self-play's generic one) and ``message`` (what a
    reply says, cut where it runs into a later turn; without it, the whole reply). ``rung`` orders the levels as a
    curriculum climbs them (decision 0, two-turn 1, two-seat 2, the multi-turn horizons 3, 4, 5; a new level without
    one comes after them), which is how `level_names` and `seat_levels` list them. A row's fields are what the
    conformance suite (`tests/test_level_rows.py`) holds every row to, a test's own new level too.
    """

    name: str
    families: Callable[[], tuple[str, ...]]
    generate: Callable[[str, int, str, Variant], Task]
    check: Callable[[Task, Sequence[Utterance]], Verdict]
    play: Play
    seat_prompt: Callable[[Task, str, Said], DecisionPrompt] | None = None
    follow_up: Callable[[Task, str, Said], str | None] | None = None
    message: Callable[[Task, str], str] | None = None
    rung: int = 99
    summary: str = ""  # one line for the CLI's help
    # a right transcript of a task (the level's witness): the conformance suite (tests/test_level_rows.py) checks
    # that it passes and that nothing completes before its settling turn; the reward invariants read it for a level
    # they have no witness of their own for
    reference: Callable[[Task], list[Utterance]] | None = None

    def __post_init__(self) -> None:
        if self.play not in PLAYS:
            raise ValueError(f"level {self.name!r}: unknown play {self.play!r}; plays are {', '.join(PLAYS)}")
        if self.play == "seats" and self.seat_prompt is None:
            raise ValueError(f"level {self.name!r} is played in seats and has no seat_prompt")


LEVEL_ROWS: Table[Level] = Table("level")


def register_level(row: Level) -> Level:
    """Add a level's row (the same row again is a no-op; another row of that name is an error); return it."""
    return LEVEL_ROWS.register(row.name, row)


def level_names() -> tuple[str, ...]:
    """Return the generated levels, as a curriculum climbs them (by ``rung``, then in registration order)."""
    order = {name: i for i, name in enumerate(LEVEL_ROWS)}
    return tuple(sorted(LEVEL_ROWS, key=lambda name: (LEVEL_ROWS[name].rung, order[name])))


def curriculum_levels() -> tuple[str, ...]:
    """Every level a lifelong curriculum may name, as it climbs: the generated levels a learner plays against code
    (their rows: decision, two-turn), then the episode levels (starter, easy, medium, hard). Read when asked."""
    return (*(name for name in level_names() if LEVEL_ROWS[name].play != "seats"), STARTER, *LEVELS)


def play_of(level: str) -> str:
    """How ``level`` is played: its row's ``play`` (decision, two-turn, seats), or ``episode`` (an episode level)."""
    row = LEVEL_ROWS.get(level)
    return row.play if row is not None else "episode"


def is_sampled(level: str) -> bool:
    """Whether ``level`` is played move by move against code, outside the episode graph (its rows are samples)."""
    return play_of(level) in ("decision", "two-turn")


def known_curriculum_level(level: str) -> str:
    """Return ``level`` if a lifelong curriculum may name it; else fail in one line naming the levels."""
    if level not in curriculum_levels():
        raise ValueError(f"unknown curriculum level {level!r}; the levels are {', '.join(curriculum_levels())}")
    return level


# a lifelong plan's level as a model field holds it: checked, offered by the CLI and listed in the JSON schema from
# `curriculum_levels` when each is asked (a level row registered later counts), never typed out
CurriculumLevel = Annotated[str, AfterValidator(known_curriculum_level), Names(curriculum_levels)]


def level_families(level: str) -> tuple[str, ...]:
    """Return the families a level has tasks of (a generated level's row says; episode levels have them all)."""
    if level in LEVEL_ROWS:
        return LEVEL_ROWS[level].families()
    return task_families()


def synthesize(family: str, level: str, seed: int, split: str = "train", variant: Variant = SHARED) -> Task:
    """Generate one task; the same arguments always give the same task.

    ``variant`` switches the name pool and mutual friend's list length (`Variant`); two-seat and multi-turn
    tasks take only a name pool.
    """
    if level in LEVEL_ROWS:  # a generated level: its row's generator
        return LEVEL_ROWS[level].generate(family, seed, split, variant)
    if family not in FAMILY_ROWS and not is_game(family):
        raise ValueError(f"unknown task family {family!r}; families are {', '.join(task_families())}")
    if level not in LEVEL_KNOBS:
        raise ValueError(f"unknown level {level!r}; levels are {', '.join((*level_names(), STARTER, *LEVELS))}")
    rng = random.Random(_seed_string(split, family, level, seed, variant))
    parts = FAMILY_ROWS[family].generate(rng, level, variant) if family in FAMILY_ROWS else game_deal(
        family, rng, level, variant)
    return Task(task_id=task_id(family, level, seed, split, variant), family=family, level=level, seed=seed,
                split=split, generator=_generator(variant), **parts)
