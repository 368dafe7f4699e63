"""swm: social world models for language agents, on LangGraph.

The public surface: the typed social state, the runtime context, errors and usage accounting.
Everything installs under this one import root: graphs in ``swm.graphs`` (``from swm.graphs import ask``),
nodes in ``swm.nodes``, persistence in ``swm.checkpoints`` and prompt files in ``swm.prompts`` (the checkout's
top-level ``graphs/``, ``nodes/``, ``checkpoints/`` and ``prompts/`` are links to those folders).
"""

from swm.context import SWMContext
from swm.errors import InputError, ModelCallFailed, ModelOutputError, ModelTimeout, ModelUnavailable, SWMError
from swm.state import PerspectiveEntry, SocialStep, SocialWorld, ValidationReport
from swm.usage import total_usage
from swm.validation import validate_s3ap

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
