"""The steps of one self-play iteration, called by the graph's nodes: roll out, score, estimate, update, evaluate.

The policy cache, the samplers and the serving checks are `swm.selfplay.serving`'s.

Bulk data lives in the experience store (`swm.selfplay.store`) and the run directory
(checkpoints); every step is idempotent, so a node interrupted by a kill is simply run again:
a rollout already stored is not played again, scoring and advantages rewrite the same rows
from the same inputs, and an update whose checkpoint exists is not trained again.

torch is imported only inside the steps that need it, so plans, the graph and the CLI load
without the train extra.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from swm.checkpoints.store import StoreRecords
from swm.games import get_game
from swm.selfplay import store as sps
from swm.selfplay.checkpoint import checkpoint_dir, has_checkpoint, meta, save_atomic
from swm.selfplay.game_rollout import play_game_rollout
from swm.selfplay.journal import journalled
from swm.selfplay.judge import judge_turns
from swm.selfplay.plan import SelfPlayPlan
from swm.selfplay.rewards import filtered_counts, score, score_game
from swm.selfplay.rollout import Sampler, play
from swm.selfplay.served import resolve_sampler
from swm.selfplay.serving import POOL, SeededSampler, served_sampler
from swm.selfplay.state import (
    AdvantageStats,
    IterationSteps,
    IterationSummary,
    RoleReward,
    RolloutJob,
    ScoreStats,
    UpdateStats,
)
from swm.stats import mean_ci
from swm.tasks.families import Task
from swm.training import advantages as adv
from swm.training.trajectory import Rollout


def ensure_initial_checkpoint(plan: SelfPlayPlan) -> None:
    """Write iteration 0's checkpoint (a fresh adapter, seeded) unless it exists."""
    if has_checkpoint(plan.run_dir, 0):
        return
    import torch  # optional: the [train] extra

    with POOL.lock:
        policy = POOL.get(plan.policy, None)
        policy.reset_adapter(plan.seed)
        optimizer = None
        save_atomic(plan.run_dir, 0, lambda tmp: policy.save(tmp, optimizer, {"iteration": 0, "seed": plan.seed,
                                                                               "torch": torch.__version__}))
        POOL.forget(plan.policy)


def rollout_jobs(plan: SelfPlayPlan, store: StoreRecords, iteration: int) -> list[RolloutJob]:
    """Return the iteration's training rollouts that are not yet in the store (the G samples of each task)."""
    jobs = []
    for unit_id, unit in plan.units("train", iteration).items():
        for g in range(plan.group_size):
            rollout_id = f"{plan.run_id}/i{iteration}/train/{unit_id}/g{g}"
            if not sps.rollout_done(store, rollout_id):
                jobs.append(RolloutJob(rollout_id=rollout_id, unit_id=unit_id, unit=unit, iteration=iteration,
                                       sample=g, phase="train", plan=plan))
    return jobs


def _play(plan: SelfPlayPlan, job: RolloutJob, sampler: Sampler) -> Rollout:
    rollout_id, iteration, sample = job["rollout_id"], job["iteration"], job["sample"]
    if "task" in job["unit"]:
        return play(Task.model_validate(job["unit"]["task"]), sampler, max_turns=plan.max_turns,
                    rollout_id=rollout_id, iteration=iteration, sample=sample, transcript=plan.transcript)
    return play_game_rollout(str(plan.game), sampler, seed=job["unit"]["game_seed"], players=plan.players,
                             options=plan.game_options, task_id=job["unit_id"], illegal=plan.illegal,
                             rollout_id=rollout_id, iteration=iteration, sample=sample, transcript=plan.transcript)


def run_rollout(plan: SelfPlayPlan, store: StoreRecords, job: RolloutJob, checkpoint_iteration: int) -> Rollout:
    """Play one rollout under the checkpoint of ``checkpoint_iteration`` and store it (failed or not).

    The plan's sampler decides how: served by llama.cpp (the checkpoint's adapter as a GGUF LoRA)
    or sampled in torch; the rollout records which (``sampler``).
    """
    checkpoint = checkpoint_dir(plan.run_dir, checkpoint_iteration)
    seed_key = f"{plan.seed}/{job['rollout_id'].split('/', 1)[1]}"
    if resolve_sampler(plan.policy) == "served":
        sampler, spec = served_sampler(plan, checkpoint, seed_key)
        kept = journalled(sampler, store, job["rollout_id"])  # a kill mid-rollout pays no turn twice
        rollout = _play(plan, job, kept)
        rollout.sampler, rollout.reseeded_turns = spec, sampler.reseeded
    else:
        with POOL.lock:
            kept = journalled(SeededSampler(POOL.get(plan.policy, checkpoint), seed_key), store, job["rollout_id"])
            rollout = _play(plan, job, kept)
        rollout.sampler = "torch"
    rollout.journal_turns = kept.replayed
    sps.put_rollout(store, plan.run_id, job["phase"], rollout)
    return rollout


def role_rewards(rollouts: list[Rollout]) -> dict[str, RoleReward]:
    """Mean (with a 95% t-interval) of each role's seat return (the sum of its turns' rewards)."""
    by_role: dict[str, list[float]] = defaultdict(list)
    for r in rollouts:
        for seat in r.seats:
            if seat.turns:
                by_role[seat.role].append(sum(t.reward for t in seat.turns))
    out = {}
    for role, values in sorted(by_role.items()):
        mean, half, n = mean_ci(values)
        out[role] = RoleReward(mean=mean, ci95=half, n=n)
    return out


def shuffle_rewards(rollouts: list[Rollout], seed: int) -> None:
    """The shuffled-reward control: permute the rollouts' rewards among them (one seeded permutation for every role,
    so a joint reward stays joint), each seat's last-turn reward and outcome moving together; the verdicts stay."""
    order = sorted(range(len(rollouts)), key=lambda i: rollouts[i].rollout_id)
    perm = order[:]
    random.Random(seed).shuffle(perm)
    last = {(i, s.role): (s.turns[-1].reward, s.outcome) for i, r in enumerate(rollouts) for s in r.seats if s.turns}
    for i, j in zip(order, perm, strict=True):
        for seat in rollouts[i].seats:
            if seat.turns and (j, seat.role) in last:
                seat.turns[-1].reward, seat.outcome = last[(j, seat.role)]


def shuffle_turn_rewards(rollouts: list[Rollout], seed: int) -> None:
    """The shuffled-reward control at turn scope: every turn's reward, whole (each part of it already added and
    capped), permuted among all the rollouts' turns by one seeded permutation; the verdicts and outcomes stay."""
    turns = [t for r in sorted(rollouts, key=lambda r: r.rollout_id) for s in r.seats for t in s.turns]
    rewards = [t.reward for t in turns]
    perm = list(range(len(turns)))
    random.Random(seed).shuffle(perm)
    for turn, j in zip(turns, perm, strict=True):
        turn.reward = rewards[j]


def score_rollouts(plan: SelfPlayPlan, store: StoreRecords, iteration: int, phase: str,
                   judge_model: Any = None) -> ScoreStats:
    """Score every stored rollout of the iteration and phase; failed ones are counted and left out.

    With ``judge_model`` (and ``plan.reward.judge_weight > 0``) task turns are also judged one by one.
    """
    start = time.perf_counter()
    units = plan.units(phase, iteration)
    rollouts = sps.load_rollouts(store, plan.run_id, iteration, phase)
    good = [r for r in rollouts if not r.failed]
    passed = 0
    judged = {"calls": 0, "unjudged": 0}
    gains = belief_of(plan, iteration, phase, good, units)
    for r in good:
        if plan.game:
            score_game(r, plan.reward)
        else:
            task = Task.model_validate(units[r.task_id]["task"])
            scores = None
            if judge_model is not None and plan.reward.judge_weight > 0:
                scores, counts = judge_turns(judge_model, r, task)
                judged = {k: judged[k] + counts[k] for k in judged}
            own = {turn: gain for (rid, turn), gain in gains.items() if rid == r.rollout_id} if gains else None
            _, verdict = score(r, task, plan.reward, scores, own)
            passed += int(verdict.passed)
        sps.put_rollout(store, plan.run_id, phase, r)
    if plan.shuffle_rewards and phase == "train":
        control = shuffle_turn_rewards if plan.shuffle_scope == "turn" else shuffle_rewards
        control(good, plan.seed * 7919 + iteration)
        for r in good:
            sps.put_rollout(store, plan.run_id, phase, r)
    counts = filtered_counts(good)
    pass_rate = passed / len(good) if good and not plan.game else None
    # every game played to its end, a dropped one's too: a game's signals are the moderator's, not the reward's
    games = [s for r in rollouts if isinstance(s := (r.verdict or {}).get("signals"), dict)]
    signals = get_game(plan.game).pool_signals(games) if plan.game else None
    filtered = sum(v for k, v in counts.items() if k != "turns")
    tokens = sum(r.tokens for r in rollouts)
    seconds = sum(r.seconds for r in rollouts)
    return ScoreStats(rollouts=len(rollouts), failed=len(rollouts) - len(good),
                      failures=[r.failed for r in rollouts if r.failed][:5], pass_rate=pass_rate,
                      reward=role_rewards(good), filtered=counts, filtered_rate=filtered / counts["turns"]
                      if counts["turns"] else None, tokens=tokens, rollout_seconds=seconds,
                      tokens_per_s=tokens / seconds if seconds else None, judge=judged, signals=signals,
                      reseeded=sum(r.reseeded_turns for r in rollouts), seconds=time.perf_counter() - start)


def belief_of(plan: SelfPlayPlan, iteration: int, phase: str, rollouts: list[Rollout],
              units: dict[str, dict[str, Any]]) -> dict[tuple[str, int], float]:
    """The training rollouts' belief gains ((rollout, turn) → nats) under their sampling checkpoint, when the plan
    mixes them in (``reward.belief``); permuted among the turns for the shuffled-turn control. A gain is computed
    once and recorded on its turn (`SeatTurn.belief`, the control's too): a rescored rollout reads them back, and
    `shuffled` permutes them again, seeded, to the same draw."""
    if plan.reward.belief <= 0 or phase != "train" or plan.game:
        return {}
    from swm.selfplay.belief import iteration_gains, shuffled

    raw: dict[tuple[str, int], float] = {}
    todo = []
    for r in rollouts:
        turns = [t for s in r.seats for t in s.turns]
        if turns and all(t.belief is not None for t in turns):
            raw.update({(r.rollout_id, t.turn): float(t.belief or 0.0) for t in turns})
        else:
            todo.append(r)
    if todo:
        with POOL.lock:
            policy = POOL.get(plan.policy, checkpoint_dir(plan.run_dir, iteration))
            tasks = {tid: Task.model_validate(units[tid]["task"]) for tid in {r.task_id for r in todo}}
            every = iteration_gains(policy, [(r, tasks[r.task_id]) for r in todo], plan.ppo)
            for r in todo:
                gains = every[r.rollout_id]
                for seat in r.seats:
                    for t in seat.turns:
                        t.belief = gains.get(t.turn, 0.0)
                        raw[(r.rollout_id, t.turn)] = t.belief
    return shuffled(raw, plan.seed * 7919 + iteration + 1) if plan.reward.belief_shuffle else raw


def _baselines_file(run_dir: Path, iteration: int) -> Path:
    return run_dir / "baselines" / f"iter-{iteration:04d}.json"


def role_baselines(run_dir: Path, iteration: int) -> dict[str, float]:
    """The role-conditioned baselines after ``iteration`` (``family/role`` → b); none before the first."""
    path = _baselines_file(run_dir, iteration)
    return {str(k): float(v) for k, v in json.loads(path.read_text()).items()} if path.is_file() else {}


def save_role_baselines(run_dir: Path, iteration: int, baselines: dict[str, float]) -> None:
    """Write the baselines after ``iteration`` atomically: iteration N's are a function of N − 1's and N's rollouts,
    so an interrupted advantages step recomputes the same file."""
    path = _baselines_file(run_dir, iteration)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(baselines, sort_keys=True))
    os.replace(tmp, path)


def estimate_advantages(plan: SelfPlayPlan, store: StoreRecords, iteration: int) -> AdvantageStats:
    """Compute token advantages and returns of the iteration's scored rollouts, normalised per role."""
    start = time.perf_counter()
    rollouts = [r for r in sps.load_rollouts(store, plan.run_id, iteration, "train") if not r.failed]
    cfg = plan.advantage
    if adv.estimator(cfg.estimator).critic:  # the estimator reads the value head: fill its token values
        with POOL.lock:
            from swm.training.ppo import token_values  # optional: the [train] extra (it imports torch)

            pairs: list[tuple[float, float]] = []
            token_values(POOL.get(plan.policy, checkpoint_dir(plan.run_dir, iteration)), rollouts, plan.ppo, pairs)
        check_served_tokens(plan, store, iteration, rollouts, pairs)
    baselines = role_baselines(plan.run_dir, iteration - 1) if adv.estimator(cfg.estimator).stateful else None
    raw = adv.assign_advantages(rollouts, cfg, baselines)
    for r in rollouts:
        sps.put_rollout(store, plan.run_id, "train", r)
    if baselines is not None:
        save_role_baselines(plan.run_dir, iteration, baselines)
    return AdvantageStats(estimator=cfg.estimator, turns=sum(len(s.turns) for r in rollouts for s in r.seats),
                          baselines=baselines, raw_mean=sum(raw) / len(raw) if raw else None,
                          raw_abs_max=max((abs(a) for a in raw), default=None), seconds=time.perf_counter() - start)


def check_served_tokens(plan: SelfPlayPlan, store: StoreRecords, iteration: int, rollouts: list[Rollout],
                        pairs: list[tuple[float, float]], phase: str = "train") -> dict[str, Any]:
    """Stop the run unless the server's log-probs of the tokens it sampled are the torch policy's (`check_sampled`).

    ``pairs`` are the (served, torch) log-probs of the iteration's tokens that π_old was just scored for. On a
    mismatch the iteration's rollouts of ``phase`` are deleted before the one line (`ServedMismatch`, exit 3): they
    were never the adapter's, and a rerun with the same thread plays them again rather than train on them.
    """
    from swm.serving.verify import ServedMismatch, check_sampled

    spec = next((r.sampler for r in rollouts if "@" in r.sampler), "")
    name, _, url = spec.partition("@")
    try:
        return check_sampled(pairs, url or str(plan.policy.lora_server or ""), name or "the adapter",
                             f"iteration {iteration}'s {'held-out ' if phase == 'eval' else ''}rollouts")
    except ServedMismatch:
        sps.drop_rollouts(store, plan.run_id, iteration, phase)
        raise


def update_policy(plan: SelfPlayPlan, store: StoreRecords, iteration: int) -> UpdateStats:
    """PPO on the iteration's samples, saved atomically as checkpoint ``iteration + 1``.

    Idempotent: an existing checkpoint is read, not trained again. A diverging loss returns
    ``{"diverged": reason}`` and writes nothing: the last good checkpoint stays the latest.
    """
    if has_checkpoint(plan.run_dir, iteration + 1):
        return dict(meta(plan.run_dir, iteration + 1).get("update", {})) | {"resumed": True}
    import torch  # optional: the [train] extra

    from swm.training.ppo import Diverged, fill_old_logprobs, make_optimizer, ppo_update, training_samples

    start = time.perf_counter()
    rollouts = [r for r in sps.load_rollouts(store, plan.run_id, iteration, "train") if not r.failed]
    samples = training_samples(rollouts, plan.ppo.sequences)
    previous = checkpoint_dir(plan.run_dir, iteration)
    critic = adv.estimator(plan.advantage.estimator).critic  # only an estimator that reads the value head trains it
    ppo = plan.ppo if critic else plan.ppo.model_copy(update={"value_coef": 0.0})
    with POOL.lock:
        policy = POOL.get(plan.policy, previous)
        optimizer = make_optimizer(policy, ppo)
        if (previous / "optimizer.pt").is_file():
            optimizer.load_state_dict(torch.load(previous / "optimizer.pt", weights_only=True))
        scoring = time.perf_counter()
        pairs: list[tuple[float, float]] = []
        scored = fill_old_logprobs(policy, samples, ppo, pairs)  # π_old of the rows the sampler left unscored
        scoring = time.perf_counter() - scoring
        served = check_served_tokens(plan, store, iteration, rollouts, pairs)
        torch.manual_seed(plan.seed * 7919 + iteration)
        try:
            stats: UpdateStats = {**(ppo_update(policy, optimizer, samples, ppo) if samples else {"steps": 0.0})}
        except Diverged as err:
            POOL.forget(plan.policy)
            return {"diverged": str(err), "seconds": time.perf_counter() - start}
        stats["seconds"] = time.perf_counter() - start
        stats["score_old_seconds"] = scoring
        stats["scored_rows"] = float(scored)
        # what the plan's "auto" settings came to on this machine: torch's threads, bfloat16 autocast or not
        stats["threads"] = float(torch.get_num_threads())
        stats["bfloat16"] = 1.0 if policy.uses_bfloat16 else 0.0
        stats["samples"] = float(len(samples))
        if served["tokens"]:
            stats["served_tokens"], stats["served_distance"] = float(served["tokens"]), float(served["distance"] or 0)
        save_atomic(plan.run_dir, iteration + 1, lambda tmp: policy.save(
            tmp, optimizer, {"iteration": iteration + 1, "update": stats}))
    return stats


def evaluate_policy(plan: SelfPlayPlan, store: StoreRecords, iteration: int, concurrency: int = 1) -> ScoreStats:
    """Play the held-out tasks (or game seeds) under checkpoint ``iteration + 1``, one rollout each, and score them.

    Up to ``concurrency`` rollouts play at once; each is seeded by its own id, so the results do
    not depend on which finishes first.
    """

    start = time.perf_counter()
    jobs = [RolloutJob(rollout_id=f"{plan.run_id}/i{iteration}/eval/{unit_id}/g0", unit_id=unit_id, unit=unit,
                       iteration=iteration, sample=0, phase="eval", plan=plan)
            for unit_id, unit in plan.units("eval").items()]
    jobs = [job for job in jobs if not sps.rollout_done(store, job["rollout_id"])]
    if concurrency <= 1 or len(jobs) <= 1:
        for job in jobs:
            run_rollout(plan, store, job, iteration + 1)
    else:
        if resolve_sampler(plan.policy) == "served":
            # start the adapter's server from this thread, which lives as long as the run: a server is
            # stopped when the thread that started it ends (PR_SET_PDEATHSIG), as the pool's threads do
            served_sampler(plan, checkpoint_dir(plan.run_dir, iteration + 1), "start")
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            for future in [pool.submit(run_rollout, plan, store, job, iteration + 1) for job in jobs]:
                future.result()
    check_held_out(plan, store, iteration)
    out = score_rollouts(plan, store, iteration, "eval")
    out["seconds"] = time.perf_counter() - start
    return out


HELD_OUT_CHECKED = 2  # held-out rollouts whose served log-probs are compared with the checkpoint's, per evaluation


def check_held_out(plan: SelfPlayPlan, store: StoreRecords, iteration: int) -> dict[str, Any] | None:
    """Stop the run unless the server played checkpoint ``iteration + 1`` on the held-out rollouts too.

    Training rollouts are checked where π_old is scored (`check_served_tokens`); held-out ones have no torch pass
    of their own, so a server honest only where it is checked could play the base on them and the run would report
    the base's held-out rate as the trained policy's. A seeded draw of `HELD_OUT_CHECKED` of them (the server cannot
    tell which: the draw is made after they are played) is scored in torch and its tokens' served log-probs compared
    (`check_sampled`). On a mismatch the iteration's held-out rollouts are deleted before the one line
    (`ServedMismatch`, exit 3): a rerun with the same thread plays them again. None when the server gave no
    log-probs (the embedded engine serves adapters swm itself loaded).
    """
    from swm.training.ppo import token_values  # optional: the [train] extra (it imports torch)

    rollouts = sorted((r for r in sps.load_rollouts(store, plan.run_id, iteration, "eval") if not r.failed),
                      key=lambda r: r.rollout_id)
    served = [r for r in rollouts if any(t.served_logprobs for s in r.seats for t in s.turns)]
    if not served:
        return None
    chosen = random.Random(f"{plan.seed}/{iteration}/held-out").sample(served, min(HELD_OUT_CHECKED, len(served)))
    pairs: list[tuple[float, float]] = []
    for r in chosen:  # scored afresh: what the sampler recorded is not trusted here
        for seat in r.seats:
            for t in seat.turns:
                t.logprobs = []
    with POOL.lock:
        token_values(POOL.get(plan.policy, checkpoint_dir(plan.run_dir, iteration + 1)), chosen, plan.ppo, pairs)
    return check_served_tokens(plan, store, iteration, chosen, pairs, "eval")


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def summarise(plan: SelfPlayPlan, current: IterationSteps) -> IterationSummary:
    """The iteration's numbers: per-role rewards (train, held-out) with 95% intervals, a game's per-role signals
    (`swm.games.signals`, train and held-out), KL, filter, speed."""
    sc, up, ev = current.get("score"), current.get("update") or {}, current.get("evaluate")
    step_seconds = sum(float(step.get("seconds") or 0.0) for step in (sc, current.get("advantages"), up) if step)
    sampling = float(sc.get("rollout_seconds") or 0.0) if sc else 0.0
    evaluating = float(ev.get("seconds") or 0.0) if ev else 0.0
    return IterationSummary(
        estimator=plan.advantage.estimator, sampler=resolve_sampler(plan.policy), group_size=plan.group_size,
        temperature=plan.policy.temperature, reward=sc.get("reward") if sc else None,
        pass_rate=sc.get("pass_rate") if sc else None, eval_reward=ev.get("reward") if ev else None,
        eval_pass_rate=ev.get("pass_rate") if ev else None, signals=sc.get("signals") if sc else None,
        eval_signals=ev.get("signals") if ev else None, kl=up.get("kl"), loss=up.get("loss"), clipped=up.get("clipped"),
        filtered_rate=sc.get("filtered_rate") if sc else None, filtered=sc.get("filtered") if sc else None,
        rollouts=sc.get("rollouts") if sc else None, failed=sc.get("failed") if sc else None,
        tokens=sc.get("tokens") if sc else None, tokens_per_s=sc.get("tokens_per_s") if sc else None,
        reseeded=sc.get("reseeded") if sc else None, rows=_number(up.get("rows")),
        skipped_rows=_number(up.get("skipped_rows")),
        sampling_seconds=sampling, update_seconds=float(up.get("seconds") or 0.0), evaluate_seconds=evaluating,
        seconds=sampling + step_seconds + evaluating)
