"""Build the smallest valid instance of a JSON schema, and the scripted replies the fake server sends.

`minimal_instance` walks a tool's ``parameters`` schema (the form ``convert_to_openai_tool`` and
OpenAI's function calling use): required properties only, short strings, lists at their
``minItems``, the first enum value, numbers inside their range, ``$ref`` followed into ``$defs``.

Some schemas are valid JSON but fail swm's own rule checks: a minimal ``S3APParse`` has no
steps, so ``validate_s3ap`` rejects it and the parse graph repairs it twice. `s3ap_parse_for`
writes a parse that passes every rule, with agents taken from the narrative in the prompt, so
the parse graph's floor (one call) is reachable against the fake server as against a good model.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel

FILL = "ok"


def minimal_instance(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> Any:
    """Return a minimal instance that validates against ``schema``."""
    defs = {**(defs or {}), **schema.get("$defs", {}), **schema.get("definitions", {})}
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return minimal_instance(defs[name], defs)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [o for o in schema[key] if o.get("type") != "null"] or schema[key]
            return minimal_instance(options[0], defs)
    if "allOf" in schema:
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            merged.update(part)
        return minimal_instance(merged, defs)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        props = schema.get("properties", {})
        return {name: minimal_instance(props[name], defs) for name in schema.get("required", []) if name in props}
    if kind == "array" and "prefixItems" in schema:  # a tuple: one value per position
        return [minimal_instance(part, defs) for part in schema["prefixItems"]]
    if kind == "array":
        items = schema.get("items", {})
        out = [minimal_instance(items, defs) for _ in range(int(schema.get("minItems", 0)))]
        if len(out) > 1 and all(isinstance(v, str) for v in out):  # distinct, as names usually must be
            high = items.get("maxLength") if isinstance(items, dict) else None
            out = [(f"{v}{i}" if high is None or len(f"{v}{i}") <= high else v) for i, v in enumerate(out)]
        return out
    if kind == "string":
        low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
        text = FILL if len(FILL) >= low else FILL + "x" * (low - len(FILL))
        return text[: int(high)] if high is not None else text
    if kind in ("integer", "number"):
        return _number_in(schema, kind == "integer")
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return {}


def _number_in(schema: dict[str, Any], integer: bool) -> int | float:
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum", schema.get("exclusiveMaximum"))
    value: float = 0
    if low is not None and value < low:
        value = low + (1 if "exclusiveMinimum" in schema and "minimum" not in schema else 0)
    if high is not None and value > high:
        value = high - (1 if "exclusiveMaximum" in schema and "maximum" not in schema else 0)
    return int(value) if integer else float(value)


_STOP = frozenset("""A An The He She They It We I You His Her Their Its Then After Before When While
Meanwhile Later Now Next There Here This That These Those One Two Three Where What Who Why How Which
In On At Of And But Or So If As To From By With Without Into Out Up Down Over Under Yes No Not All
Some Each Every Both Either Neither Also Finally First Second Last Once Later Soon Afterwards
Story Question Answer Context""".split())


def narrative_of(prompt: str) -> str:
    """Return the narrative block of swm's parse prompt (the whole prompt if it is not found)."""
    match = re.search(r"#### Context:(.*?)#### Task specific instructions", prompt, re.S)
    block = match.group(1) if match else prompt
    fenced = re.search(r'<data name="narrative">\n(.*?)\n</data>', block, re.S)
    return fenced.group(1) if fenced else block


def agents_in(text: str, limit: int = 2) -> list[str]:
    """Return up to ``limit`` capitalised names from a narrative, in order of appearance."""
    found: list[str] = []
    for word in re.findall(r"\b[A-Z][a-z]{1,30}\b", text):
        if word not in _STOP and word not in found:
            found.append(word)
        if len(found) == limit:
            break
    return found


def s3ap_parse_for(prompt: str) -> dict[str, Any]:
    """Return an ``S3APParse`` instance that passes ``validate_s3ap`` for the prompt's narrative."""
    agents = agents_in(narrative_of(prompt)) or ["Sally", "Anne"]
    first, rest = agents[0], agents[1:]
    return {
        "agents_names": agents,
        "socialized_context": [
            {"timestep": "0", "state": f"{' and '.join(agents)} are in a room with a basket and a box.",
             "observations": [f"{first}: <same_as_state /> <mental_state>wants to keep the ball</mental_state>"]
                             + [f"{a}: <same_as_state />" for a in rest],
             "actions": [f"{first}: puts the ball in the basket"] + [f"{a}: none" for a in rest]},
            {"timestep": "1", "state": "The ball is in the basket.",
             "observations": [f"{a}: <same_as_last_action_0 />" for a in agents],
             "actions": [f"{a}: none" for a in agents]},
        ],
    }


SCHEMA_MODULES = ("swm.schemas", "swm.social.schemas", "swm.social.models", "swm.social.judgement",
                  "swm.social.sotopia_eval", "swm.lifelong.records")


def known_schemas() -> dict[str, Any]:
    """Return swm's pydantic tool schemas by class name, from the modules that define them."""


    found: dict[str, Any] = {}
    for name in SCHEMA_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseModel) and value is not BaseModel:
                found.setdefault(value.__name__, value)
    return found


def scripted_arguments(tool: str, prompt: str, scripts: dict[str, Any] | None = None) -> Any:
    """Return the arguments the fake server would send for ``tool``: scripted, else minimal."""

    script = (scripts or {}).get(tool)
    if script is not None:
        return script(prompt, {}) if callable(script) else script
    if tool == "S3APParse":
        return s3ap_parse_for(prompt)
    schema = known_schemas().get(tool)
    if schema is None:
        raise KeyError(f"no scripted reply and no known schema for tool {tool!r}")
    return minimal_instance(convert_to_openai_tool(schema)["function"]["parameters"])
