"""Lifelong-loop nodes that play and score episodes: synthesize, collect, evaluate, deploy, report.

``synthesize`` makes a cycle's training tasks (cycle 0 sets the run up: the dev and test splits
and the initial policy ``p0``); the routes fan out one ``Send`` per episode not yet in the store
(`swm.lifelong.jobs`) to ``collect`` (training episodes under the deployed policy) or ``evaluate``
(held-out episodes of every level, on the dev and the test split, under the incumbent and the
candidate). Each branch plays its episode through the episode graph that the graph module hands
to `episode_player` (`swm.lifelong.episodes`). ``deploy`` applies the deploy gate on the dev split
and writes both curves' R[cycle, ·] from the test split (`swm.lifelong.deploy.deploy_cycle`; the shifted
test cells, phase ``shift``, are in neither), then logs the cycle's numbers to the run's tracker
(`swm.lifelong.scalars`);
``report`` computes the metrics and writes the Markdown report and plots.
"""

from __future__ import annotations

from collections.abc import Callable

from langgraph.config import get_config
from langgraph.runtime import Runtime
from langgraph.types import Command, Send

from swm.context import LifelongContext
from swm.graph_state import thread_run_id
from swm.lifelong import store as ls
from swm.lifelong.deploy import deploy_cycle, deploy_request, gate_cycle
from swm.lifelong.episodes import play_job
from swm.lifelong.jobs import (
    EVAL_PHASES,
    SHIFT,
    collect_jobs,
    eval_split,
    failed_now,
    job_plan,
    pending_evaluations,
    plan_of,
    refuse_failed,
    shift_tasks,
    training_tasks,
)
from swm.lifelong.plan import LifelongPlan
from swm.lifelong.report import write_report
from swm.lifelong.scalars import cycle_scalars
from swm.lifelong.state import EpisodeJob, LifelongState
from swm.lifelong.update import PolicyVersion
from swm.review import DeployReview, ask_person
from swm.serving.embedded import engine_info
from swm.tasks.splits import HELDOUT_VERSION, SPLITS


def synthesize_node(state: LifelongState, runtime: Runtime[LifelongContext]) -> LifelongState:
    """Make the cycle's tasks (cycle 0: the held-out tasks and the initial policy)."""
    store = runtime.context.experience_store()
    plan = plan_of(state)
    cycle = state.get("cycle", 0)
    if cycle == 0:
        plan = plan.model_copy(update={"run_id": thread_run_id(plan.run_id, LifelongPlan().run_id)})
        splits = {split: eval_split(plan, split) for split in SPLITS}
        if plan.eval_shifts:
            splits[SHIFT] = shift_tasks(plan)
        for task in (t for tasks in splits.values() for t in tasks):
            ls.put_task(store, task)
        ls.put_splits(store, plan.run_id, splits, HELDOUT_VERSION)
        ls.put_policy(store, plan.run_id, PolicyVersion(version="p0", kind="base"))
        return {"plan": plan, "cycle": 0, "phase": "evaluate", "incumbent": "p0", "candidate_policy": "p0"}
    for task in training_tasks(plan, cycle):
        ls.put_task(store, task)
    # a thread begun before the state held the model holds the plan's dump: put the model in its place
    return {"phase": "collect"} if isinstance(state.get("plan"), LifelongPlan) else {"phase": "collect", "plan": plan}


EpisodeNode = Callable[[EpisodeJob, Runtime[LifelongContext]], LifelongState]


Runner = Callable[[EpisodeJob, LifelongContext], LifelongState]


def episode_player(episode_graph: object, game_graph: object = None, runner: Runner | None = None) -> EpisodeNode:
    """Return the Send-branch node that plays one episode job through ``episode_graph`` and records it once.

    The graph module passes the compiled episode graph in (and the game graph, for game families such
    as werewolf), so this layer never imports the wiring. ``runner(job, ctx)`` plays it elsewhere
    instead (a Ray worker, `swm.commands.workers`), returning what `play_job` returns.
    """

    def play(job: EpisodeJob, runtime: Runtime[LifelongContext]) -> LifelongState:
        """Play one episode (training, or dev/test under a policy) and record it once."""
        if runner is not None:
            out = runner(job, runtime.context)
        else:  # the branches in flight together here: a task's samples among them can share a request
            in_flight = int(get_config().get("max_concurrency") or 1)
            out = play_job(job, runtime.context, episode_graph, game_graph, in_flight=in_flight)
        # per-episode progress for `stream_mode="custom"` (Studio, the SDK), as the CLI's bar counts them
        run_id = job_plan(job).run_id
        runtime.stream_writer({"event": "episode", "run_id": run_id, "cycle": job["cycle"],
                               "phase": job["phase"], "episode_id": job["episode_id"],
                               "failed": not (out.get("collected") or out.get("evaluated")),
                               "episodes_done": ls.count_episodes(runtime.context.experience_store(),
                                                                  run_id)})
        return out

    return play


def after_synthesize(state: LifelongState, runtime: Runtime[LifelongContext]) -> list[Send] | str:
    """Fan out the episodes still to play: baseline evaluation at cycle 0, collection after."""
    store = runtime.context.experience_store()
    if state.get("cycle", 0) == 0:
        return _fan_out(runtime, state, "evaluate", pending_evaluations(state, store)) or "deploy"
    jobs = [j for j in collect_jobs(state) if not ls.episode_done(store, j["episode_id"])]
    return _fan_out(runtime, state, "collect", jobs) or "convert"


def after_update(state: LifelongState, runtime: Runtime[LifelongContext]) -> list[Send] | str:
    """Fan out the dev and test episodes still to play (the candidate's; the incumbent's are reused)."""
    store = runtime.context.experience_store()
    return _fan_out(runtime, state, "evaluate", pending_evaluations(state, store)) or "deploy"


def resend(state: LifelongState, runtime: Runtime[LifelongContext]) -> Command[str] | None:
    """On a rerun (``ctx.resend_failed``), send again the current phase's episodes that failed, once.

    The node that would refuse them (``convert``, ``deploy``) returns this instead: the same
    fan-out its phase started with, which sends only the episodes not yet in the store.
    """
    ctx = runtime.context
    if not ctx.resend_failed or not failed_now(state, ctx.experience_store()):
        return None
    ctx.resend_failed = False  # once: if they fail again, the node refuses them (`refuse_failed`) and the run stops
    evaluating = state.get("cycle", 0) == 0 or state.get("phase") in ("evaluate", "deploy")
    route = after_update if evaluating and state.get("cycle", 0) > 0 else after_synthesize
    sends = route(state, runtime)
    return Command(goto=sends) if isinstance(sends, list) and sends else None


def _fan_out(runtime: Runtime[LifelongContext], state: LifelongState, node: str, jobs: list[EpisodeJob]) -> list[Send]:
    """Send one branch per job, announcing how many to `stream_mode="custom"` readers."""
    runtime.stream_writer({"event": "fan_out", "cycle": state.get("cycle", 0), "node": node, "episodes": len(jobs)})
    return [Send(node, j) for j in jobs]


def deploy_node(state: LifelongState, runtime: Runtime[LifelongContext]) -> Command[str]:
    """Apply the deploy gate and write the R rows (`deploy_cycle`), announce the choice, and advance the cycle.

    With the ``deploy`` review point (``LifelongContext.review``) a person decides instead of the gate: the run
    stops with a `swm.review.DeployRequest` (the gate's verdict beside both policies' dev rates) and goes on
    when resumed with ``Command(resume="approve" | "refuse")``.

    It routes itself (the next cycle's ``synthesize``, or ``report``), so that on a rerun the failed
    evaluations it sends again (`resend`) are the only branches of the next super-step.
    """
    if (again := resend(state, runtime)) is not None:
        return again
    store = runtime.context.experience_store()
    plan, cycle = plan_of(state), state.get("cycle", 0)
    refuse_failed(store, plan, cycle, EVAL_PHASES)
    incumbent, candidate = state.get("incumbent", "p0"), state.get("candidate_policy", "p0")
    decision = None
    if cycle > 0 and runtime.context.reviews("deploy") and candidate != incumbent:
        # nothing is written before the person answers: a resumed node runs again from its start
        decision = gate_cycle(store, plan, cycle, incumbent, candidate)
        answer = ask_person(deploy_request(store, plan, cycle, incumbent, candidate, decision), DeployReview)
        decision = decision.reviewed_as(answer.decision, answer.note)
    serving, explain = deploy_cycle(store, plan, cycle, incumbent, candidate, decision)
    runtime.context.tracker.log(cycle_scalars(store, plan, cycle, candidate), step=cycle, axis="cycle")
    runtime.stream_writer({"event": "deploy", "cycle": cycle, "serving": serving, "candidate": candidate,
                           "decision": explain})
    return Command(goto="synthesize" if cycle + 1 <= plan.cycles else "report",
                   update={"incumbent": serving, "cycle": cycle + 1, "phase": "synthesize",
                           "decisions": {str(cycle): explain}})


def report_node(state: LifelongState, runtime: Runtime[LifelongContext]) -> LifelongState:
    """Compute ACC/BWT/FWT/F_k, store them, and write the report and plots."""

    ctx = runtime.context
    serving = None
    if ctx.uses_embedded():
        serving = {**engine_info(), "concurrency": get_config().get("max_concurrency")}
    path = write_report(ctx.experience_store(), plan_of(state, ctx), usage=state.get("usage"),
                        agent_spec=ctx.spec_for("agent"), serving=serving)
    return {"report_path": str(path), "phase": "done"}
