"""swm: social world models for language agents, on LangGraph.

The public surface: the typed social state, the runtime context, errors and usage accounting.
Everything installs under this one import root: graphs in ``swm.graphs`` (``from swm.graphs import ask``),
nodes in ``swm.nodes``, persistence in ``swm.checkpoints`` and prompt files in ``swm.prompts`` (the checkout's
top-level ``graphs/``, ``nodes/``, ``checkpoints/`` and ``prompts/`` are links to those folders).

The names below are imported on first use (PEP 562), so ``import swm`` and ``swm --help`` pull in no
model client, LangChain or checkpoint code: `SWMContext` brings those when a program reaches for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from swm.lazy import lazy_exports

if TYPE_CHECKING:
    from swm.context import SWMContext
    from swm.errors import InputError, ModelCallFailed, ModelOutputError, ModelTimeout, ModelUnavailable, SWMError
    from swm.state import PerspectiveEntry, SocialStep, SocialWorld, ValidationReport
    from swm.usage import total_usage
    from swm.validation import validate_s3ap

# public name -> the module that defines it
_HOMES = {"SWMContext": "swm.context", "total_usage": "swm.usage", "validate_s3ap": "swm.validation",
          **dict.fromkeys(["InputError", "ModelCallFailed", "ModelOutputError", "ModelTimeout", "ModelUnavailable",
                           "SWMError"], "swm.errors"),
          **dict.fromkeys(["PerspectiveEntry", "SocialStep", "SocialWorld", "ValidationReport"], "swm.state")}

__all__ = [
    "InputError",
    "ModelCallFailed",
    "ModelOutputError",
    "ModelTimeout",
    "ModelUnavailable",
    "PerspectiveEntry",
    "SWMContext",
    "SWMError",
    "SocialStep",
    "SocialWorld",
    "ValidationReport",
    "total_usage",
    "validate_s3ap",
]


__getattr__, __dir__ = lazy_exports(__name__, _HOMES, __all__)
