"""Cases for the social graphs: foresee_act, lookahead, episode and one lifelong cycle.

Each maker receives the imported ``graphs.<name>`` module and returns its cases. The fake
server needs one script for these graphs: agents ``speak`` (the minimal valid action is
``none``, and three idle turns end an episode early, which would hide the per-turn floor).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench import lifelong_case
from bench.graph_case import GraphCase, NotMeasurable
from swm.scenarios import shipped

SCRIPTS: dict[str, Any] = {
    "AgentActionForModel": {"action_type": "speak", "argument": "I could do 45 if you take two.", "to": []},
}
EPISODE_TURNS = 4
ROLLOUT_WIDTH, ROLLOUT_DEPTH = 3, 2


def _scenario() -> Any:
    return shipped()[0]


def _policy_input(i: int) -> dict[str, Any]:
    scenario = _scenario()
    names = scenario.names
    return {"scenario": scenario.model_dump(mode="json"), "episode_id": f"bench-policy-{i}", "turn": 0,
            "actor": names[0], "active": list(names), "tested_agent": names[0]}


def foresee_act_cases(module: Any) -> list[GraphCase]:
    return [GraphCase("foresee_act", module.build, _policy_input, lambda inp: 3,
                      note="sample + predict + refine = 3 calls/turn")]


def lookahead_cases(module: Any) -> list[GraphCase]:
    formula = getattr(module, "calls_per_turn", None)
    if formula is None:
        raise NotMeasurable("graphs/lookahead.py has no calls_per_turn(width, depth)")
    n, k = ROLLOUT_WIDTH, ROLLOUT_DEPTH
    return [GraphCase(f"lookahead N={n} k={k}", module.build, _policy_input, lambda inp: int(formula(n, k)),
                      context={"lookahead_width": n, "lookahead_depth": k},
                      critical=lambda inp: 1 + k + (1 if n > 1 else 0) + 1,
                      note=f"N + N*k + N + 1 = {formula(n, k)} calls; critical path 1 + k + 1 + 1 "
                           "(samples, simulations and scores run as parallel Send branches)")]


def _episode_case(module: Any, policy: str, per_turn: int) -> GraphCase:
    def inputs(i: int) -> dict[str, Any]:
        scenario = _scenario()
        return {"scenario": scenario.model_dump(mode="json"), "episode_id": f"bench-ep-{policy}-{i}",
                "policies": {n: policy for n in scenario.names}, "max_turns": EPISODE_TURNS}

    # the default judge protocol (sotopia's evaluator) judges every agent in one call
    floor = EPISODE_TURNS * per_turn + 1
    return GraphCase(f"episode ({policy}, {EPISODE_TURNS} turns)", module.build, inputs, lambda inp: floor,
                     note=f"{EPISODE_TURNS} turns x {per_turn} + 1 judge call (every agent at once)")


def episode_cases(module: Any) -> list[GraphCase]:
    return [_episode_case(module, "plain", 1), _episode_case(module, "foresee", 3)]


MAKERS: dict[str, Callable[[Any], list[GraphCase]]] = {
    "foresee_act": foresee_act_cases,
    "lookahead": lookahead_cases,
    "episode": episode_cases,
    "lifelong": lifelong_case.cases,
}
