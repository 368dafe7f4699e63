"""swm: social world models for language agents, on LangGraph.

The public surface: the typed social state, the runtime context, errors and usage accounting.
Graphs live in the top-level ``graphs`` package (``from graphs import ask``), nodes in ``nodes``,
persistence in ``checkpoints`` and prompt files in ``prompts``.
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
