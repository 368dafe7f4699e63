"""The names and defaults the CLI declares its options with, importable without what runs them.

`swm.llm` (LangChain, the model clients), `swm.context` (pydantic, the store), `swm.graph_state`,
`swm.social.graph_state` and `swm.nodes.parse` re-export these;
a command module reads them from here, so ``swm X --help`` loads neither (tests/test_cli.py).
"""

from __future__ import annotations

from typing import Literal, get_args

ROLES = ("parser", "qa", "agent", "world_model", "partner", "judge")
DEFAULT_TIMEOUT = 120.0  # seconds per request to an endpoint; a hung one costs (retries + 1) × this
EMBEDDED_TIMEOUT = 600.0  # the embedded model generates on a shared CPU: a long parse takes minutes
DEFAULT_MAX_RETRIES = 3  # the OpenAI client's retries of a transient fault, per request
ActOrder = Literal["sotopia", "prefix"]
ACT_ORDERS: tuple[str, ...] = get_args(ActOrder)
ParseTask = Literal["generic", "tomi", "hitom", "fantom", "mmtom", "confaide"]  # whose parse rules and prompts apply
PARSE_TASKS: tuple[str, ...] = get_args(ParseTask)
Mode = Literal["vanilla", "cot", "s3ap", "s3ap_only"]  # how a question is answered (swm.graph_state, swm.nodes.parse)
MODES: tuple[str, ...] = get_args(Mode)
NEEDS_PARSE = ("s3ap", "s3ap_only")
ActStrategy = Literal["plain", "foresee", "lookahead"]  # how a seat of a social episode acts (swm.social.graph_state)
EPISODE_POLICIES: tuple[str, ...] = get_args(ActStrategy)  # swm.nodes.env.POLICIES
# the strategies' earlier names, as stored plans, episode rows and checkpoints may hold them
RENAMED_STRATEGIES: dict[str, ActStrategy] = {"rollout": "lookahead"}
