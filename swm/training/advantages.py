"""Advantage estimators of self-play RL: hierarchical GAE (turn, then token) and critic-free group returns.

Pure Python (no torch): lists of floats in, lists of floats out, so every number can be checked
by hand. A *seat trajectory* is one seat's own turns in one episode, in order; another seat's
turns never enter it (their words are context in the prompt, never a step of this trajectory).

**Hierarchical** (the default, PPO with a value head). Per seat, with turn rewards ``r_k`` and
``V_k`` the value at the last generated token of turn k (``V_K = 0`` after the seat's last turn):

* turn level: ``δ_k = r_k + γ·V_{k+1} − V_k`` and ``A_k = Σ_l (γλ)^l · δ_{k+l}``; the turn's
  value target is the λ-return ``R_k = A_k + V_k``;
* token level: inside turn k every token but the last has reward 0, the last token carries the
  turn's signal, nothing is bootstrapped past the turn's end, and GAE runs over the turn's
  token values with ``(γ_tok, λ_tok)``.

The turn's signal is switchable (``turn_signal``): ``"return"`` (default) rewards the last token
with ``R_k``, so that token's advantage is exactly ``A_k`` and the single value head regresses one
target everywhere (the λ-return); ``"advantage"`` rewards it with ``A_k`` itself, the literal
reading of the design note, whose last-token advantage is ``A_k − V_k`` (use it with a value head
that predicts advantages, not returns).

**Critic-free** (``estimator="group"``, GRPO-style): a seat's return is ``Σ_k γ^k r_k``; within a
group (the G rollouts of one task) and a role, ``(R − mean) / (std + ε)`` (``group_scale="std"``;
``"none"`` keeps ``R − mean``, as Dr. GRPO), the same value for every token the seat generated.

**Group, turn by turn** (``estimator="group-turn"``, critic-free and turn-level; GiGPO, arXiv 2505.10978, groups
the steps that start from one and the same state, this groups them by their place in the conversation): turn k
of a seat gets its return-to-go ``G_k = Σ_{j≥k} γ^(j−k) r_j``, normalised as the group estimator normalises,
among the group's seats of the same role at the same turn k; every token of the turn gets it. With only a final
reward it is the group estimator (every ``G_k`` is the outcome); with turn rewards (belief gain, a judge) each
turn is credited with what it and the turns after it earned, not what the turns before it did. Whitened as the
group estimator (scaled only).

**Role-conditioned** (``estimator="role"``, SPIRAL's RAE, arXiv 2506.24119): one running baseline
per (family, role), moved by one EMA step of decay α (``baseline_decay``) per seat of that key in the
batch — ``b ← αⁿ·b + (1 − αⁿ)·mean(R)`` for n seats, SPIRAL's per-trajectory update with the batch
mean — then ``A = R − b`` with the updated baseline, the same for every token the seat
generated. A group of self-play rollouts is not a set of exchangeable attempts by one agent (the
other seat changes too), so the baseline is the role's expected return over time, not the group's
mean; the baselines persist across iterations with the run (`RoleBaselines`).

**Rejection sampling** (``estimator="rs"``, the rs-sft arm on the same rollouts): a seat whose return
is above 0 (a passed joint task) gets advantage 1 at every token it generated, any other seat none, so
its turns are left out of the update (`swm.training.ppo.training_samples` takes turns with advantages):
the update is then supervised fine-tuning on the passing rollouts' turns (at a ratio of 1 the clipped
objective's gradient is the log-likelihood's), with the budget in sampled rollouts of the other
estimators. Not whitened.

`normalise_per_role` whitens token advantages per role over a batch before the PPO update (``whiten``): the
group estimator's are only scaled, so a group whose returns are all equal keeps advantage 0 at every token and
the update skips its rows (`swm.training.ppo.skips_zero_rows`).

Each estimator is one row of `ESTIMATORS`, looked up by name (``AdvantageConfig.estimator``, the CLI's
``--estimator`` choices): how it sets a batch's advantages, whether it reads the value head (``critic``), how
its advantages are whitened. A new estimator is a function and a `register_estimator` call
(docs/contributing.md, "Adding an advantage estimator").
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from swm.tables import Names, Table
from swm.training.trajectory import Rollout, SeatTurn


def _known_estimator(name: str) -> str:
    estimator(name)
    return name


def _learn_estimator(name: str) -> str:
    if not estimator(name).learn:
        raise ValueError(f"estimator {name!r} is not offered by swm learn; its estimators are "
                         f"{', '.join(learn_estimator_names())}")
    return name


def estimator_names() -> tuple[str, ...]:
    """Return every registered estimator's name, in registration order."""
    return ESTIMATORS.names()


def learn_estimator_names() -> tuple[str, ...]:
    """Return the estimators ``swm learn --update ppo`` offers (rs is swm learn's own ``--update rs-sft``)."""
    return tuple(name for name, row in ESTIMATORS.items() if row.learn)


# an estimator's name, checked against `ESTIMATORS` when a config is built (so a row registered later counts)
EstimatorName = Annotated[str, AfterValidator(_known_estimator), Names(estimator_names)]
LearnEstimatorName = Annotated[str, AfterValidator(_learn_estimator), Names(learn_estimator_names)]


class AdvantageConfig(BaseModel):
    """The estimator and its constants; recorded with every run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    estimator: EstimatorName = Field("hierarchical", description=(
        "hierarchical (turn- then token-level GAE with a value head), group (critic-free, normalised over a "
        "task's G rollouts), role (a running baseline per family and role) or rs (rejection sampling: clone "
        "the passing rollouts' turns, the rs-sft arm on the same rollouts)"))
    gamma: float = Field(1.0, ge=0, le=1, description="turn-level discount γ")
    lam: float = Field(0.95, ge=0, le=1, description="turn-level GAE λ")
    gamma_tok: float = Field(1.0, ge=0, le=1, description="token-level discount γ_tok")
    lam_tok: float = Field(0.95, ge=0, le=1, description="token-level GAE λ_tok")
    turn_signal: Literal["return", "advantage"] = "return"
    group_scale: Literal["std", "none"] = "std"
    baseline_decay: float = Field(0.95, ge=0, lt=1, description="α of the role-conditioned running baseline")
    eps: float = Field(1e-6, gt=0)
    whiten: Literal["estimator", "centre", "scale", "off"] = Field(
        "estimator", description="how token advantages are whitened per role over the batch: the estimator's own "
        "way (its row in ESTIMATORS), about the mean (centre), only scaled by the std (scale), or not at all. The "
        "group estimator's own is scale: its advantages are centred within each group already, and centring again "
        "over the batch's tokens would give the rows of a group with no signal a small advantage of their length's "
        "making (and so a forward and a step); centre is how it was whitened before 2026-12-01")


def gae(rewards: Sequence[float], values: Sequence[float], gamma: float, lam: float,
        bootstrap: float = 0.0) -> tuple[list[float], list[float]]:
    """Return (advantages, λ-returns) of one sequence; ``bootstrap`` is the value after its last step."""
    if len(rewards) != len(values):
        raise ValueError(f"{len(rewards)} rewards but {len(values)} values")
    advantages = [0.0] * len(rewards)
    running = 0.0
    for k in reversed(range(len(rewards))):
        following = values[k + 1] if k + 1 < len(values) else bootstrap
        delta = rewards[k] + gamma * following - values[k]
        running = delta + gamma * lam * running
        advantages[k] = running
    return advantages, [a + v for a, v in zip(advantages, values, strict=True)]


@dataclass(frozen=True)
class TurnInput:
    """One turn of a seat: its reward and the value head's value at each generated token."""

    reward: float
    token_values: Sequence[float]

    @property
    def value(self) -> float:
        """V_k: the value at the turn's last generated token."""
        if not self.token_values:
            raise ValueError("a turn with no generated tokens has no value")
        return float(self.token_values[-1])


@dataclass(frozen=True)
class HierarchicalAdvantages:
    """Per turn: A_k and R_k; per token of each turn: advantage and value target."""

    turn_advantages: list[float]
    turn_returns: list[float]
    token_advantages: list[list[float]]
    token_returns: list[list[float]]


def hierarchical(turns: Sequence[TurnInput], config: AdvantageConfig) -> HierarchicalAdvantages:
    """Turn-level GAE over a seat's turns, then token-level GAE inside each turn (module docstring)."""
    turn_adv, turn_ret = gae([t.reward for t in turns], [t.value for t in turns], config.gamma, config.lam)
    token_adv: list[list[float]] = []
    token_ret: list[list[float]] = []
    for turn, a_k, r_k in zip(turns, turn_adv, turn_ret, strict=True):
        signal = r_k if config.turn_signal == "return" else a_k
        rewards = [0.0] * (len(turn.token_values) - 1) + [signal]
        adv, ret = gae(rewards, [float(v) for v in turn.token_values], config.gamma_tok, config.lam_tok)
        token_adv.append(adv)
        token_ret.append(ret)
    return HierarchicalAdvantages(turn_adv, turn_ret, token_adv, token_ret)


def discounted_return(rewards: Sequence[float], gamma: float) -> float:
    """Return Σ_k γ^k r_k."""
    return sum(r * gamma**k for k, r in enumerate(rewards))


def group_normalised(returns: Sequence[float], keys: Sequence[Hashable], config: AdvantageConfig) -> list[float]:
    """Normalise returns within each key (a (group, role) pair): ``(R − mean) / (std + ε)``.

    The std is the population std of the key's returns; a key whose returns are all equal gets 0
    for all of them (no signal, as in GRPO).
    """
    if len(returns) != len(keys):
        raise ValueError(f"{len(returns)} returns but {len(keys)} keys")
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        members[key].append(i)
    out = [0.0] * len(returns)
    for idx in members.values():
        values = [returns[i] for i in idx]
        if max(values) == min(values):  # exactly 0, not the rounding of (R − mean) / ε: such a row is skipped
            continue
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        for i in idx:
            centred = returns[i] - mean
            out[i] = centred / (std + config.eps) if config.group_scale == "std" else centred
    return out


RoleKey = tuple[str, str]  # (family, role)


def role_key(key: RoleKey) -> str:
    """The JSON-safe name of a (family, role) key: ``family/role``."""
    return f"{key[0]}/{key[1]}"


def role_conditioned(returns: Sequence[float], keys: Sequence[RoleKey], baselines: dict[str, float],
                     config: AdvantageConfig) -> list[float]:
    """SPIRAL's RAE: update each (family, role) running baseline with the batch, return ``R − b``.

    ``baselines`` (``family/role`` → b) is updated in place; a key seen for the first time starts
    at its batch mean, so its first advantages are the batch's centred returns.
    """
    if len(returns) != len(keys):
        raise ValueError(f"{len(returns)} returns but {len(keys)} keys")
    members: dict[str, list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        members[role_key(key)].append(i)
    for name, idx in members.items():
        mean = sum(returns[i] for i in idx) / len(idx)
        old = baselines.get(name)
        decay = config.baseline_decay ** len(idx)  # one EMA step per seat, as SPIRAL's per-trajectory update
        baselines[name] = mean if old is None else decay * old + (1 - decay) * mean
    return [returns[i] - baselines[role_key(key)] for i, key in enumerate(keys)]


def broadcast(advantage: float, token_counts: Sequence[int]) -> list[list[float]]:
    """Give every generated token of every turn the seat's one advantage."""
    return [[advantage] * n for n in token_counts]


def normalise_per_role(advantages: Sequence[Sequence[float]], roles: Sequence[str],
                       eps: float = 1e-6, centre: bool = True) -> list[list[float]]:
    """Whiten token advantages per role over a batch: each role's tokens get mean 0, std 1.

    ``advantages[i]`` are the token advantages of sequence i (one turn), ``roles[i]`` its role.
    A role whose tokens all share one advantage is only centred (to 0). ``centre=False`` only
    scales (by the std about the mean): the role-conditioned estimator's baseline is kept, not
    replaced by the batch mean.
    """
    if len(advantages) != len(roles):
        raise ValueError(f"{len(advantages)} sequences but {len(roles)} roles")
    pooled: dict[str, list[float]] = defaultdict(list)
    for adv, role in zip(advantages, roles, strict=True):
        pooled[role].extend(adv)
    stats = {}
    for role, values in pooled.items():
        mean = sum(values) / len(values) if values else 0.0
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)) if values else 0.0
        stats[role] = (mean, std)
    if not centre:
        return [[a / (stats[role][1] + eps) if stats[role][1] > eps else a for a in adv]
                for adv, role in zip(advantages, roles, strict=True)]
    return [[(a - stats[role][0]) / (stats[role][1] + eps) if stats[role][1] > eps else a - stats[role][0]
             for a in adv] for adv, role in zip(advantages, roles, strict=True)]


Assign = Callable[[list[Rollout], AdvantageConfig, dict[str, float]], None]


@dataclass(frozen=True)
class Estimator:
    """One advantage estimator, a row of `ESTIMATORS`.

    ``assign(rollouts, config, baselines)`` sets every turn's ``advantages`` and ``returns`` (one per
    generated token) before whitening; ``baselines`` is the run's running state (``family/role`` → b),
    updated in place by an estimator that keeps one. ``critic``: it reads the value head's token values
    (`swm.training.ppo.token_values` fills ``turn.values`` first) and the update trains the head.
    ``whiten``: token advantages are whitened per role over the batch, about the mean (``centre``) or only
    scaled. ``learn``: ``swm learn --update ppo`` offers it. ``stateful``: it keeps running state across
    iterations in ``baselines``, which a self-play run then loads before and saves after each iteration (a row
    that updates ``baselines`` without saying so would lose them between iterations; `tests/test_estimators.py`
    checks every row).
    """

    name: str
    summary: str
    assign: Assign
    critic: bool = False
    whiten: bool = True
    centre: bool = True
    learn: bool = True
    stateful: bool = False


ESTIMATORS: Table[Estimator] = Table("estimator")


def register_estimator(row: Estimator) -> Estimator:
    """Add an estimator to `ESTIMATORS` (a different one of the same name is an error); return it."""
    return ESTIMATORS.register(row.name, row)


def estimator(name: str) -> Estimator:
    """Return the estimator of that name, or fail naming the registered ones."""
    return ESTIMATORS.row(name)


def _assign_hierarchical(rollouts: list[Rollout], cfg: AdvantageConfig, _baselines: dict[str, float]) -> None:
    for r in rollouts:
        for seat in r.seats:
            if not seat.turns:
                continue
            est = hierarchical([TurnInput(t.reward, t.values) for t in seat.turns], cfg)
            for turn, a, ret in zip(seat.turns, est.token_advantages, est.token_returns, strict=True):
                turn.advantages, turn.returns = a, ret


def _broadcast_returns(rollouts: list[Rollout], cfg: AdvantageConfig,
                       normalise: Callable[[list[float], list[tuple[Rollout, str]]], list[float]]) -> None:
    """Give every token of a seat one advantage, ``normalise(returns, (rollout, role) per seat)``."""
    seats = [(r, s) for r in rollouts for s in r.seats if s.turns]
    returns = [discounted_return([t.reward for t in s.turns], cfg.gamma) for _, s in seats]
    advantages = normalise(returns, [(r, s.role) for r, s in seats])
    for (_, seat), seat_adv, seat_ret in zip(seats, advantages, returns, strict=True):
        rows = broadcast(seat_adv, [len(t.token_ids) for t in seat.turns])
        for turn, row in zip(seat.turns, rows, strict=True):
            turn.advantages, turn.returns = row, [seat_ret] * len(row)


def _assign_group(rollouts: list[Rollout], cfg: AdvantageConfig, _baselines: dict[str, float]) -> None:
    _broadcast_returns(rollouts, cfg, lambda returns, keys: group_normalised(
        returns, [(r.task_id, role) for r, role in keys], cfg))


def _assign_group_turn(rollouts: list[Rollout], cfg: AdvantageConfig, _baselines: dict[str, float]) -> None:
    """Each turn its return-to-go, normalised among the group's seats of the same role at the same turn."""
    rows: list[tuple[SeatTurn, float]] = []
    keys: list[tuple[str | None, str, int]] = []
    for r in rollouts:
        for seat in r.seats:
            rewards = [t.reward for t in seat.turns]
            for k, turn in enumerate(seat.turns):
                rows.append((turn, discounted_return(rewards[k:], cfg.gamma)))
                keys.append((r.task_id, seat.role, k))
    advantages = group_normalised([ret for _, ret in rows], keys, cfg)
    for (turn, ret), a in zip(rows, advantages, strict=True):
        turn.advantages, turn.returns = [a] * len(turn.token_ids), [ret] * len(turn.token_ids)


def _assign_role(rollouts: list[Rollout], cfg: AdvantageConfig, baselines: dict[str, float]) -> None:
    _broadcast_returns(rollouts, cfg, lambda returns, keys: role_conditioned(
        returns, [(r.family or "task", role) for r, role in keys], baselines, cfg))


def _assign_rs(rollouts: list[Rollout], cfg: AdvantageConfig, _baselines: dict[str, float]) -> None:
    for r in rollouts:
        for seat in r.seats:
            kept = discounted_return([t.reward for t in seat.turns], cfg.gamma) > 0
            for turn in seat.turns:
                turn.advantages = [1.0] * len(turn.token_ids) if kept else []
                turn.returns = [1.0 if kept else 0.0] * len(turn.advantages)


register_estimator(Estimator("hierarchical", "turn- then token-level GAE with a value head", _assign_hierarchical,
                             critic=True))
register_estimator(Estimator("group", "critic-free group returns, normalised over a task's G rollouts",
                             _assign_group, centre=False))
register_estimator(Estimator("group-turn", "critic-free and turn-level: each turn's return-to-go, normalised over "
                             "the group's seats of its role at the same turn", _assign_group_turn, centre=False))
register_estimator(Estimator("role", "one running baseline per (family, role) (SPIRAL's RAE)", _assign_role,
                             centre=False, stateful=True))
register_estimator(Estimator("rs", "clone the passing rollouts' turns (the rs-sft arm on the same rollouts)",
                             _assign_rs, whiten=False, learn=False))


def assign_advantages(rollouts: list[Rollout], cfg: AdvantageConfig,
                      baselines: dict[str, float] | None = None) -> list[float]:
    """Set every turn's token advantages and returns with the config's estimator (`ESTIMATORS`); return the raw ones.

    The hierarchical estimator reads each turn's ``values`` (`token_values` fills them); the group
    estimator groups seats by (task, role); the role-conditioned one updates ``baselines``
    (``family/role`` → running baseline, in place; the run keeps them between iterations) and is
    only scaled per role, not centred, so its baseline stays the one subtracted. Advantages are then
    whitened per role (rs: left as they are).
    """
    row = estimator(cfg.estimator)
    row.assign(rollouts, cfg, {} if baselines is None else baselines)
    turns = [(s.role, t) for r in rollouts for s in r.seats for t in s.turns]
    raw = [a for _, t in turns for a in t.advantages]
    how = cfg.whiten if cfg.whiten != "estimator" else ("off" if not row.whiten else
                                                         "centre" if row.centre else "scale")
    if how == "off":
        return raw
    whitened = normalise_per_role([t.advantages for _, t in turns], [role for role, _ in turns], cfg.eps,
                                  centre=how == "centre")
    for (_, turn), advantages in zip(turns, whitened, strict=True):
        turn.advantages = advantages
    return raw
