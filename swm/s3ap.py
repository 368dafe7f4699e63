"""The S3AP text format: its tags, the regexes that find them, and agent-name normalisation.

The paper's S3AP JSON writes an agent's view as text with a few tags: ``<same_as_state />``
(the scene), ``<same_as_last_action />`` / ``<same_as_last_action_x />`` (the previous step's
actions, all or agent x's, x 0-based) and ``<mental_state>…</mental_state>``; ``none`` says an
agent saw or did nothing. `swm.state` (the typed state) and `swm.validation` (the critic's
rules over raw replies) both read the format from here, so neither imports the other's privates.
"""

from __future__ import annotations

import re

NONE = "none"
SAME_AS_STATE = "<same_as_state />"
MENTAL_RE = re.compile(r"<mental_state>(.*?)</mental_state>", re.S)
# a tag and the one space before it (``to_s3ap`` writes "text <mental_state>…</mental_state>")
MENTAL_TAG_RE = re.compile(r"[ \t]?<mental_state>.*?</mental_state>", re.S)
LAST_ACTION_RE = re.compile(r"<same_as_last_action(?:_(\d+))?\s*/>")
STATE_RE = re.compile(r"<same_as_state\s*/>")
ANY_TAG_RE = re.compile(r"</?([a-zA-Z_][\w]*)[^>]*?/?>")
KNOWN_TAGS = frozenset({"same_as_state", "mental_state"})
LAST_ACTION_TAG_RE = re.compile(r"same_as_last_action(?:_\d+)?$")


AGENT_NAME_MAX = 60
# letters and digits of any script, inner spaces, and the marks real names carry (O'Brien, Jean-Luc, St. John)
_AGENT_NAME_RE = re.compile(r"[^\W_](?:[\w.'\u2019 -]*[\w.])?")


def check_agent_name(name: str) -> str:
    """Return ``name`` if it can stand as an agent's name, else raise ValueError saying why.

    A name is 1 to `AGENT_NAME_MAX` characters: letters and digits of any script, single inner
    spaces, ``.``, ``'``, ``-`` and ``_``. Names are rendered into prompts (always inside a
    ``<data>`` fence), the action schema's recipient list and file names; brackets, colons,
    quotes and line breaks have no business in them.
    """
    if not isinstance(name, str) or not name:
        raise ValueError("an agent name must be a non-empty string")
    if len(name) > AGENT_NAME_MAX:
        raise ValueError(f"agent name {name[:40]!r}... is {len(name)} characters (at most {AGENT_NAME_MAX})")
    if not _AGENT_NAME_RE.fullmatch(name) or "  " in name:
        raise ValueError(f"agent name {name!r} may hold only letters, digits, single spaces and . ' - _ "
                         "(starting with a letter or digit)")
    return name


def agent_key(name: str) -> str:
    """Return the comparison key of an agent name: case and spacing do not matter."""
    return re.sub(r"[\s_\-]+", "", name).casefold()


def is_none(text: str | None) -> bool:
    """Tell whether a field says the agent observed or did nothing."""
    return text is None or text.strip().casefold() in {"", NONE, "none.", "null", "n/a"}


def split_mental_state(observation: str) -> tuple[str, str]:
    """Split an observation into its external part and its ``<mental_state>`` content.

    Only the tag and the one space before it are removed: runs of spaces inside the external
    text are content and survive a round trip.
    """
    found = MENTAL_RE.findall(observation)
    if not found:
        return observation, ""
    mental = " ".join(m.strip() for m in found)

    def drop(match: re.Match[str]) -> str:
        before, after = observation[match.start() - 1:match.start()], observation[match.end():match.end() + 1]
        glued = match.group(0)[0] == "<" and before.strip() and after.strip()
        return " " if glued else ""  # "saw<m>…</m>it" keeps its words apart

    external = MENTAL_TAG_RE.sub(drop, observation).strip()
    return external, mental


def is_known_tag(tag: str) -> bool:
    """Tell whether ``tag`` (a name found by `ANY_TAG_RE`) is one the format defines."""
    return tag in KNOWN_TAGS or LAST_ACTION_TAG_RE.match(tag) is not None
