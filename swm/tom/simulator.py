"""A seeded ToMi-world simulator: Sally-Anne stories with gold answers and the gold S3AP.

The world: a few agents, two rooms, one object in one of two containers of the main room.
Events are actions (an agent enters a room, exits its room, moves the object to the other
container), the statement of where the object is (``place``), and distractors (an agent likes
or dislikes a thing: a mental state, not an event anyone sees). Every event has several
phrasings, so a parser cannot memorise one template.

Perception rule (the one the gold answers and the gold S3AP both follow):

* an agent *witnesses* an action when it is in the room where the action happens (for an
  entry, after entering; for an exit, before leaving; the actor always witnesses its own
  action), and witnesses a ``place`` statement when it is in the object's room;
* an agent in the object's room sees where the object is, so its first-order belief is the
  object's container at the last moment it was in that room after the object was placed;
* X's belief about Y's belief is the object's container at the last moment X and Y were both
  in the object's room (each then sees the other see the object); before that, X has no
  second-order belief about Y and the question is not asked.

The gold S3AP has one step per action plus a final step: step ``i``'s state is the world
before action ``i``; its observations are what each agent witnessed since step ``i-1``
(``none`` when it witnessed nothing), written with ``<same_as_last_action_x />`` and the
object's location; a distractor is the agent's ``<mental_state>`` at the step it occurs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from swm.state import SocialStep, SocialWorld
from swm.tom.items import TomItem

NAMES = ["Sally", "Anne", "Jack", "Mia", "Omar", "Lena", "Ravi", "Chloe", "Tom", "Yuki", "Amara", "Noah"]
ROOMS = ["kitchen", "garden", "hallway", "attic", "office", "pantry", "bedroom", "garage", "porch"]
OBJECTS = ["apple", "marble", "scarf", "key", "orange", "book", "ball", "hat", "coin", "spoon"]
COLOURS = ["red", "blue", "green", "yellow"]
KINDS = ["box", "basket", "drawer", "bucket", "crate", "cupboard", "suitcase", "envelope"]
THINGS = ["melon", "the rain", "jazz", "the carrots", "the cat", "chess", "the blue_pen", "tea"]

PHRASES: dict[str, list[str]] = {
    "enter": ["{a} entered the {room}.", "{a} walked into the {room}.", "{a} came into the {room}.",
              "{a} stepped inside the {room}."],
    "enter2": ["{a} and {b} entered the {room}.", "{a} and {b} walked into the {room} together."],
    "exit": ["{a} exited the {room}.", "{a} left the {room}.", "{a} walked out of the {room}.",
             "{a} went out of the {room}."],
    "place": ["The {obj} is in the {c}.", "The {obj} was in the {c}.", "There is a {obj} in the {c}.",
              "The {obj} sat inside the {c}."],
    "move": ["{a} moved the {obj} to the {c}.", "{a} put the {obj} in the {c}.",
             "{a} transferred the {obj} into the {c}.",
             "{a} took the {obj} out of the {old} and placed it in the {c}."],
    "distract": ["{a} likes {t}.", "{a} dislikes {t}.", "{a} is fond of {t}.", "{a} hates {t}."],
}
ACTION_TEXT = {"enter": "enters the {room}", "exit": "exits the {room}", "move": "moves the {obj} to the {c}"}


@dataclass
class Event:
    """One thing that happens; ``witnesses`` is filled in by the simulation."""

    kind: str  # enter | exit | move | place | distract
    actor: str | None = None
    room: str | None = None
    container: str | None = None
    old: str | None = None
    thing: str | None = None
    witnesses: list[str] = field(default_factory=list)
    step: int = 0  # the gold step whose observations record it

    def key_terms(self) -> list[str]:
        """The words an observation of this event must mention (see `parser_score`)."""
        if self.kind in ("enter", "exit"):
            return [self.room or "", self.actor or ""]
        return [self.container or ""]


@dataclass
class SimStory:
    """A generated story: its text, agents, events, gold S3AP and gold question answers."""

    id: str
    sentences: list[str]
    agents: list[str]
    obj: str
    events: list[Event]
    world: SocialWorld
    questions: list[dict[str, str]]
    story_type: str

    @property
    def text(self) -> str:
        return "\n".join(self.sentences)

    def gold_s3ap(self) -> dict[str, Any]:
        return self.world.to_s3ap()


def _container(rng: random.Random, taken: set[str]) -> str:
    while True:
        name = f"{rng.choice(COLOURS)}_{rng.choice(KINDS)}"
        if name not in taken:
            taken.add(name)
            return name


def _plan(rng: random.Random) -> tuple[list[str], list[str], list[tuple[str, dict[str, Any]]]]:
    """Draw agents and a ToMi-shaped event sequence (before perception is simulated).

    Returns the agents in order of first mention, the two protagonists (mover, leaver), the plan.
    """
    n_agents = rng.choice([2, 3, 3])
    agents = rng.sample(NAMES, n_agents)
    room, alt = rng.sample(ROOMS, 2)
    a, b = agents[0], agents[1]
    plan: list[tuple[str, dict[str, Any]]] = []
    if rng.random() < 0.3:
        plan.append(("enter2", {"a": a, "b": b, "room": room}))
    else:
        first, second = rng.sample([a, b], 2)
        plan += [("enter", {"a": first, "room": room}), ("enter", {"a": second, "room": room})]
    plan.append(("place", {}))
    # one move by a and one or two location changes of b, in random order (ToMi's generator shape)
    acts = ["move"] + ["loc"] * rng.randint(1, 2)
    rng.shuffle(acts)
    b_in = True
    a_in = True
    for index, act in enumerate(acts):
        if act == "move":
            if a_in:
                plan.append(("move", {"a": a}))
        elif b_in:
            plan.append(("exit", {"a": b, "room": room}))
            b_in = False
        else:
            if index == len(acts) - 1 and rng.random() < 0.5:
                plan.append(("exit", {"a": a, "room": room}))
                a_in = False
            plan.append(("enter", {"a": b, "room": room if rng.random() < 0.5 else alt}))
            b_in = True
    if n_agents == 3:
        c = agents[2]
        where = rng.randint(0, len(plan))
        plan.insert(where, ("enter", {"a": c, "room": room if rng.random() < 0.6 else alt}))
        if rng.random() < 0.5:
            plan.insert(rng.randint(where + 1, len(plan)), ("exit", {"a": c, "room": None}))
    for _ in range(rng.randint(0, 2)):
        plan.insert(rng.randint(0, len(plan)), ("distract", {"a": rng.choice(agents), "t": rng.choice(THINGS)}))
    mentioned = [n for _, v in plan for n in (v.get("a"), v.get("b")) if n]
    ordered = list(dict.fromkeys(mentioned + agents))
    return ordered, [a, b], [(k, {**v, "main": room}) for k, v in plan]


class _World:
    """The world while one story is told: rooms, the object, beliefs, and the gold steps so far.

    `play` applies one planned event: it writes the story's sentence, records the event with
    its witnesses, and extends the gold S3AP (an action closes the current step). The random
    draws happen in plan order, so a seed always tells the same story.
    """

    def __init__(self, rng: random.Random, agents: list[str], main: str) -> None:
        self.rng, self.agents, self.main = rng, agents, main
        self.obj = rng.choice(OBJECTS)
        taken: set[str] = set()
        self.c1, self.c2 = _container(rng, taken), _container(rng, taken)
        self.where: dict[str, str | None] = {a: None for a in agents}  # room of each agent (None: nowhere)
        self.loc: str | None = None  # the object's container once placed
        self.start: str | None = None
        self.first: dict[str, str | None] = {a: None for a in agents}
        self.second: dict[tuple[str, str], str | None] = {}
        self.events: list[Event] = []
        self.sentences: list[str] = []
        self.pending: dict[str, str] = {}  # the current step's actions
        self.steps = [SocialStep(timestep="0", scene=self.scene(), observations={a: "none" for a in agents})]

    # ---- what is where ---------------------------------------------------------------------
    def present(self, room: str | None) -> list[str]:
        return [a for a in self.agents if room is not None and self.where[a] == room]

    def scene(self) -> str:
        parts = []
        for room in dict.fromkeys([self.main] + [r for r in self.where.values() if r]):
            people = self.present(room)
            if people:
                parts.append(f"{' and '.join(people)} {'is' if len(people) == 1 else 'are'} in the {room}.")
        away = [a for a in self.agents if self.where[a] is None]
        if away:
            parts.append(f"{' and '.join(away)} {'is' if len(away) == 1 else 'are'} not in any room.")
        if self.loc is not None:
            parts.append(f"The {self.obj} is in the {self.loc}.")
        return " ".join(parts)

    def update_beliefs(self) -> None:
        if self.loc is None:
            return
        here = self.present(self.main)
        for x in here:
            self.first[x] = self.loc
            for y in here:
                if x != y:
                    self.second[(x, y)] = self.loc

    # ---- the gold steps ----------------------------------------------------------------------
    def close_step(self) -> None:
        """Record the current step's actions and open the next step."""
        self.steps[-1].actions = {a: self.pending.get(a, "none") for a in self.agents}
        self.pending.clear()
        self.steps.append(SocialStep(timestep=str(len(self.steps)), scene=self.scene(),
                                     observations={a: "none" for a in self.agents}))

    def observe(self, agent: str, text: str) -> None:
        step = self.steps[-1]
        current = step.observations.get(agent, "none")
        step.observations[agent] = text if current == "none" else f"{current} {text}"

    def add_mental_state(self, agent: str, text: str) -> None:
        current = self.steps[-1].mental_states.get(agent)
        self.steps[-1].mental_states[agent] = f"{current} {text}" if current else text

    def say(self, kind: str, **slots: Any) -> str:
        """Tell the event in one of its phrasings; return the sentence."""
        sentence = self.rng.choice(PHRASES[kind]).format(**slots)
        self.sentences.append(sentence)
        return sentence

    # ---- events ------------------------------------------------------------------------------
    def play(self, kind: str, args: dict[str, Any]) -> None:
        """Apply one planned event (an action that cannot happen now is skipped)."""
        actor: str = args.get("a") or ""
        if kind == "place":
            self.place()
        elif kind == "distract":
            self.distract(actor, args["t"])
        else:
            acted = (self.move(actor) if kind == "move" else self.exit(actor) if kind == "exit"
                     else self.enter(kind, [actor, args["b"]] if kind == "enter2" else [actor],
                                     args.get("room") or self.where.get(actor)))
            if acted is not None:
                self.record_action(*acted)

    def move(self, actor: str) -> tuple[list[Event], list[str]] | None:
        if self.where[actor] != self.main or self.loc is None:
            return None
        new = self.c2 if self.loc == self.c1 else self.c1
        self.say("move", a=actor, obj=self.obj, c=new, old=self.loc)
        witnesses = self.present(self.main)
        event = Event("move", actor=actor, room=self.main, container=new, old=self.loc)
        self.pending[actor] = ACTION_TEXT["move"].format(obj=self.obj, c=new)
        self.loc = new
        return [event], witnesses

    def exit(self, actor: str) -> tuple[list[Event], list[str]] | None:
        room = self.where[actor]
        if room is None:
            return None
        self.say("exit", a=actor, room=room)
        witnesses = self.present(room)
        self.where[actor] = None
        self.pending[actor] = ACTION_TEXT["exit"].format(room=room)
        return [Event("exit", actor=actor, room=room)], witnesses

    def enter(self, kind: str, actors: list[str], room: str | None) -> tuple[list[Event], list[str]]:
        self.say(kind, a=actors[0], b=actors[1] if len(actors) > 1 else None, room=room)
        events = []
        for who in actors:
            self.where[who] = room
            self.pending[who] = ACTION_TEXT["enter"].format(room=room)
            events.append(Event("enter", actor=who, room=room))
        return events, self.present(room)

    def record_action(self, events: list[Event], witnesses: list[str]) -> None:
        """Close the step of an action; its witnesses observe it, and the object if they are with it."""
        self.close_step()
        acted = [a for a in self.agents if not_none(self.steps[-2].actions.get(a))]
        for event in events:
            event.witnesses = list(witnesses)
            event.step = len(self.steps) - 1
            self.events.append(event)
        for w in witnesses:
            tag = ("<same_as_last_action />" if len(acted) > 1
                   else f"<same_as_last_action_{self.agents.index(acted[0])} />")
            self.observe(w, tag)
        self.update_beliefs()
        for w in self.present(self.main):
            if self.loc is not None and w in witnesses:
                self.observe(w, f"The {self.obj} is in the {self.loc}.")

    def place(self) -> None:
        self.loc = self.start = self.c1
        self.say("place", obj=self.obj, c=self.c1)
        self.events.append(Event("place", room=self.main, container=self.c1, witnesses=self.present(self.main),
                                 step=len(self.steps) - 1))
        self.steps[-1].scene = self.scene()
        for w in self.present(self.main):
            self.observe(w, f"The {self.obj} is in the {self.c1}.")
        self.update_beliefs()

    def distract(self, actor: str, thing: str) -> None:
        """A distractor: a mental state of the agent at the current step."""
        text = self.say("distract", a=actor, t=thing)
        feeling = text[len(actor) + 1:].rstrip(".")
        self.add_mental_state(actor, f"I {_first_person(feeling)}.")

    # ---- the end -----------------------------------------------------------------------------
    def finish(self) -> SocialWorld:
        """Close the gold S3AP: the last step has no actions and carries each agent's belief."""
        self.steps[-1].actions = {a: "none" for a in self.agents}
        for a in self.agents:
            if self.first[a] is not None:
                self.add_mental_state(a, f"I believe the {self.obj} is in the {self.first[a]}.")
        return SocialWorld(agents=list(self.agents), steps=self.steps)

    def story_type(self) -> str:
        if any(v is not None and self.first[y] is not None and v != self.first[y] and self.first[x] == self.loc
               for (x, y), v in self.second.items()):
            # ToMi's sense: x itself knows where the object is, but misjudges what y believes
            return "second_order_false_belief"
        return "false_belief" if any(self.first[a] not in (None, self.loc) for a in self.agents) else "true_belief"


def generate_story(seed: int, index: int = 0) -> SimStory:
    """Generate one story deterministically from ``seed``."""
    rng = random.Random(seed)
    agents, protagonists, plan = _plan(rng)
    world = _World(rng, agents, plan[0][1]["main"])
    for kind, args in plan:
        world.play(kind, args)
    gold = world.finish()
    questions = _questions(rng, protagonists, world.obj, world.start, world.loc, world.first, world.second)
    return SimStory(id=f"sim-{seed}-{index}", sentences=world.sentences, agents=list(agents), obj=world.obj,
                    events=world.events, world=gold, questions=questions, story_type=world.story_type())


def not_none(text: str | None) -> bool:
    return text is not None and text != "none"


def _first_person(feeling: str) -> str:
    verb, _, rest = feeling.partition(" ")
    table = {"likes": "like", "dislikes": "dislike", "hates": "hate", "is": "am"}
    return f"{table.get(verb, verb)} {rest}".strip()


def _questions(rng: random.Random, agents: list[str], obj: str, start: str | None, real: str | None,
               first: dict[str, str | None], second: dict[tuple[str, str], str | None]) -> list[dict[str, str]]:
    qs: list[dict[str, str]] = []
    if start:
        qs.append({"question": f"Where was the {obj} at the beginning?", "answer": start, "qtype": "memory"})
    if real:
        qs.append({"question": rng.choice([f"Where is the {obj} really?", f"Where is the {obj} now?"]),
                   "answer": real, "qtype": "reality"})
    for a in agents[:2]:
        if first[a] is not None:
            tom = "tom" if first[a] != real else "no_tom"
            qs.append({"question": rng.choice([f"Where will {a} look for the {obj}?",
                                               f"Where does {a} think the {obj} is?"]),
                       "answer": first[a] or "", "qtype": f"first_order_{tom}"})
    for x, y in ((agents[0], agents[1]), (agents[1], agents[0])):
        belief = second.get((x, y))
        if belief is not None:
            tom = "tom" if belief != real else "no_tom"
            qs.append({"question": f"Where does {x} think that {y} searches for the {obj}?",
                       "answer": belief, "qtype": f"second_order_{tom}"})
    return qs


def generate_stories(n: int, seed: int = 0) -> list[SimStory]:
    """Generate ``n`` stories; story ``i`` depends only on (seed, i)."""
    return [generate_story(seed * 100_003 + i, i) for i in range(n)]


def story_items(stories: list[SimStory]) -> list[Any]:
    """Turn simulated stories into benchmark items (benchmark ``tomi``, kind ``location``)."""

    return [TomItem(id=f"{s.id}-q{k}", story=s.text, question=q["question"], answer=q["answer"], qtype=q["qtype"],
                    benchmark="tomi", kind="location", meta={"story_type": s.story_type, "simulated": True})
            for s in stories for k, q in enumerate(s.questions)]
