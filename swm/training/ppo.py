"""PPO-clip on the LoRA parameters and the value head, with a KL penalty to the reference policy.

Per generated token t (``mask`` = 1): ratio ρ = exp(log π − log π_old);
``policy = −min(ρ·A, clip(ρ, 1 ± clip)·A)``; ``kl`` is the k3 estimate of KL(π ‖ π_ref),
``exp(log π_ref − log π) − (log π_ref − log π) − 1`` (k1, ``log π − log π_ref``, is selectable);
``value = ½ (V − R)²``. The loss is the token mean over the batch of
``policy + kl_coef · kl + value_coef · value``. The reference policy is the base model with the
adapter disabled. A non-finite loss or gradient raises `Diverged` before that minibatch's step;
the caller then drops the in-memory policy and keeps the last saved (good) adapter.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch

from swm.training.config import PPOConfig
from swm.training.policy import Batch, LoraValueModel, collate, collate_spans, gather, spread
from swm.training.prefix import Prefix, forwarded_tokens, prefix_groups
from swm.training.trajectory import Rollout, SeatTurn
from swm.training.transcript import append_counts


class Diverged(RuntimeError):
    """The loss or a gradient is not finite: the update stops and the last good adapter stays."""


@dataclass
class Sample:
    """One row to train on: its seat's generated tokens only are targets (the prompt is context, never a target).

    A turn's row is its prompt then its reply (``spans`` None). A seat's row (`seat_sample`) is its whole
    append-only transcript, ``prompt_ids`` then ``token_ids``, with ``spans`` the (start, end) positions of its
    replies in that sequence; ``old_logprobs``, ``advantages`` and ``returns`` then hold every reply's tokens in
    order.
    """

    role: str
    prompt_ids: list[int]
    token_ids: list[int]
    old_logprobs: list[float]
    advantages: list[float]
    returns: list[float]
    spans: list[tuple[int, int]] | None = None
    # the server's log-probs of the generated tokens, aligned with ``old_logprobs`` (NaN: none for that token); empty
    # when no turn of the row has them
    served_logprobs: list[float] = field(default_factory=list)

    @property
    def sequence(self) -> list[int]:
        return [*self.prompt_ids, *self.token_ids]

    @property
    def targets(self) -> list[tuple[int, int]]:
        """The (start, end) positions of the generated tokens in `sequence`."""
        return self.spans if self.spans is not None else [(len(self.prompt_ids), len(self.sequence))]

    @property
    def generated(self) -> int:
        return sum(end - start for start, end in self.targets)


def turn_sample(role: str, turn: SeatTurn) -> Sample:
    """One turn as its own row: its prompt, then its reply."""
    return Sample(role=role, prompt_ids=turn.prompt_ids, token_ids=turn.token_ids, old_logprobs=turn.logprobs,
                  advantages=turn.advantages, returns=turn.returns, served_logprobs=served_of([turn]))


def served_of(turns: Sequence[SeatTurn]) -> list[float]:
    """The turns' served log-probs, one per generated token (NaN where the server gave none); [] when none has any."""
    if all(t.served_logprobs is None for t in turns):
        return []
    return [x for t in turns for x in (*(t.served_logprobs or [])[:len(t.token_ids)],
                                       *[math.nan] * (len(t.token_ids) - len(t.served_logprobs or [])))]


def seat_sample(role: str, turns: Sequence[SeatTurn], every_turn: bool = False) -> Sample:
    """A seat's turns as one row: its last prompt and reply hold every earlier turn (they append), each reply a span.

    Turns without advantages stay context, unless ``every_turn`` (a row to score, not to train: every reply a
    span). Raises ValueError when the turns do not append.
    """
    if append_counts(turns) != (len(turns) - 1, len(turns) - 1):
        raise ValueError("a seat's turns are one sequence only when each prompt extends the previous prompt and reply")
    trained = list(turns) if every_turn else [t for t in turns if t.advantages]
    spans = [(len(t.prompt_ids), len(t.prompt_ids) + len(t.token_ids)) for t in trained]
    first = len(turns[0].prompt_ids)
    last = turns[-1]
    return Sample(role=role, prompt_ids=last.prompt_ids[:first],
                  token_ids=[*last.prompt_ids[first:], *last.token_ids],
                  old_logprobs=[x for t in trained for x in t.logprobs],
                  advantages=[x for t in trained for x in t.advantages],
                  returns=[x for t in trained for x in t.returns], spans=spans, served_logprobs=served_of(trained))


def training_samples(rollouts: Sequence[Rollout], sequences: Literal["seat", "turn"] = "seat") -> list[Sample]:
    """The rollouts' training rows: per seat, its turns that have advantages.

    ``seat``: one row per seat whose turns append (`swm.training.transcript`), scored once; a seat whose turns
    do not (a re-rendered transcript) gives one row per turn, as ``turn`` does for every seat.
    """
    out: list[Sample] = []
    for r in rollouts:
        for s in r.seats:
            trained = [t for t in s.turns if t.advantages]
            if not trained:
                continue
            turns = s.turns[:s.turns.index(trained[-1]) + 1]
            appends = append_counts(turns) == (len(turns) - 1, len(turns) - 1)
            if sequences == "seat" and len(trained) > 1 and appends:
                out.append(seat_sample(s.role, turns))
            else:
                out += [turn_sample(s.role, t) for t in trained]
    return out


def masked_mean(x: torch.Tensor, mask: torch.Tensor, count: float | None = None) -> torch.Tensor:
    """Mean of ``x`` over the positions where ``mask`` is set (whatever ``x`` holds elsewhere).

    ``count`` divides instead of the mask's own count: a micro-batch's share of its minibatch's mean.
    """
    total = x.new_tensor(count) if count is not None else mask.sum().clamp(min=1.0)
    return torch.where(mask.bool(), x, torch.zeros_like(x)).sum() / total


def ppo_loss(policy: LoraValueModel, batch: Batch, old: torch.Tensor, ref: torch.Tensor | None, adv: torch.Tensor,
             ret: torch.Tensor, config: PPOConfig, count: float | None = None,
             prefix: Prefix | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Return the PPO loss of one minibatch (or, with ``count``, a micro-batch's share of it) and its parts.

    ``ref`` None (``kl_coef`` 0): no KL term and no reference forward pass; the parts then have no ``kl``.
    With ``prefix`` the batch holds each row's tokens after that shared prefix (`swm.training.prefix`).
    """
    m = batch.mask
    mean = functools.partial(masked_mean, mask=m, count=count)
    keep = m.bool()
    # Inputs outside the generated tokens (prompt, padding) are zeroed, so they can reach neither
    # the loss nor, through exp(), the gradient.
    old, adv, ret = (torch.where(keep, t, torch.zeros_like(t)) for t in (old, adv, ret))
    logp, values = policy.score(batch, prefix=prefix)
    ratio = torch.exp(logp - old)
    clipped = torch.clamp(ratio, 1 - config.clip, 1 + config.clip)
    pg = -torch.minimum(ratio * adv, clipped * adv)
    vloss = 0.5 * (values - ret) ** 2
    loss = mean(pg) + config.value_coef * mean(vloss)
    kl = None
    if ref is not None:
        ref = torch.where(keep, ref, torch.zeros_like(ref))
        kl = torch.exp(ref - logp) - (ref - logp) - 1 if config.kl_estimator == "k3" else logp - ref
        loss = loss + config.kl_coef * mean(kl)
    with torch.no_grad():
        stats = {"policy": float(mean(pg)), "value": float(mean(vloss)),
                 "clipped": float(mean(((ratio - 1).abs() > config.clip).float()))}
        if kl is not None:
            stats["kl"] = float(mean(kl))
    return loss, stats


def skips_zero_rows(config: PPOConfig) -> bool:
    """Whether the update leaves out rows whose advantages are all zero (`PPOConfig.skip_zero`).

    Such a row's policy term is exactly zero (ρ·0 = 0, clipped or not) and so is its gradient; its KL and
    value terms are not, so ``auto`` skips only when neither is in the loss.
    """
    if config.skip_zero == "auto":
        return config.kl_coef == 0 and config.value_coef == 0
    return config.skip_zero == "on"


def has_signal(sample: Sample) -> bool:
    """Whether any of the row's generated tokens has a non-zero advantage."""
    return any(a != 0.0 for a in sample.advantages)


def _micro_batches(policy: LoraValueModel, rows: Sequence[Sample], config: PPOConfig, *, grad: bool = False,
                   reference: bool = False) -> Iterator[tuple[list[int], Batch, Prefix | None, Prefix | None]]:
    """Yield each micro-batch of ``rows``: the rows' indices, their collated continuations, and the shared prefix
    they continue (with ``reference``, the reference model's too), or None.

    Rows that open with the same prefix (`swm.training.prefix.groups`) forward it once when ``config.shared_prefix``;
    each group's continuations go in micro-batches within ``config.micro_tokens`` (or ``config.micro_batch`` rows).
    With ``grad`` the prefix keeps its graph and, once the consumer has back-propagated the group's last micro-batch
    and asks for the next, the gradients its rows left on it go through it once (`Prefix.backward`).
    """
    pad = policy.tokenizer.pad_token_id
    for group in prefix_groups(rows, config.shared_prefix):
        members, cut = list(group.rows), group.length
        prefix = ref_prefix = None
        if cut:
            head = rows[members[0]].sequence[:cut]
            prefix = Prefix.forward(policy, head, grad=grad)
            if reference:
                ref_prefix = Prefix.forward(policy, head, reference=True)
        per = config.micro_batch or micro_rows([rows[i] for i in members], config.micro_tokens, cut)
        for first in range(0, len(members), per):
            part = members[first:first + per]
            batch = collate_spans([rows[i].sequence[cut:] for i in part],
                                  [[(a - cut, b - cut) for a, b in rows[i].targets] for i in part], pad)
            yield part, batch.to(policy.device), prefix, ref_prefix
        if grad and prefix is not None:
            prefix.backward()


def _accumulate(policy: LoraValueModel, rows: Sequence[Sample], config: PPOConfig, count: float,
                where: str) -> tuple[float, dict[str, float]]:
    """Forward and back-propagate ``rows`` (one minibatch's share ``count``), gradients accumulated over the
    micro-batches (`_micro_batches`); return the loss and its parts."""
    loss_value, stats = 0.0, dict[str, float]()
    kl = config.kl_coef > 0
    for part, batch, prefix, ref_prefix in _micro_batches(policy, rows, config, grad=True, reference=kl):
        old = spread([rows[i].old_logprobs for i in part], batch)
        adv = spread([rows[i].advantages for i in part], batch)
        ret = spread([rows[i].returns for i in part], batch)
        ref = None
        if kl:
            with torch.no_grad():
                ref, _ = policy.score(batch, reference=True, prefix=ref_prefix)
        loss, part_stats = ppo_loss(policy, batch, old, ref, adv, ret, config, count, prefix)
        if not math.isfinite(float(loss.detach())):
            raise Diverged(f"loss is {float(loss.detach())} at {where}")
        loss.backward()
        loss_value += float(loss.detach())
        stats = {k: stats.get(k, 0.0) + v for k, v in part_stats.items()}
    return loss_value, stats


def ppo_update(policy: LoraValueModel, optimizer: torch.optim.Optimizer, samples: Sequence[Sample],
               config: PPOConfig) -> dict[str, float]:
    """Run ``epochs`` passes of minibatch PPO over ``samples``; return the mean of each loss part and the counts.

    Rows without a signal are skipped where `skips_zero_rows` allows it: the minibatches are cut as if they were
    there (each minibatch's mean still divides by all its generated tokens), so the update equals the one that
    forwards them, except that a minibatch with no row left takes no optimizer step. ``rows``, ``skipped_rows``
    and ``skipped_steps`` count them over the epochs; ``forwarded_tokens`` is the tokens forwarded with a gradient.
    """
    skip = skips_zero_rows(config)
    totals: dict[str, float] = {}
    steps = skipped_rows = skipped_steps = rows = forwarded = 0
    policy.model.train()
    for _ in range(config.epochs):
        for start in range(0, len(samples), config.minibatch):
            chunk = samples[start:start + config.minibatch]
            count = float(sum(s.generated for s in chunk))
            live = [s for s in chunk if has_signal(s)] if skip else list(chunk)
            rows += len(chunk)
            skipped_rows += len(chunk) - len(live)
            if not live:
                skipped_steps += 1
                continue
            optimizer.zero_grad()
            try:
                loss_value, stats = _accumulate(policy, live, config, count, f"minibatch {start // config.minibatch}")
            except Diverged:
                optimizer.zero_grad()
                raise
            forwarded += forwarded_tokens(live, config.shared_prefix)
            norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), config.max_grad_norm)
            if not math.isfinite(float(norm)):
                optimizer.zero_grad()
                raise Diverged(f"gradient norm is {float(norm)} at minibatch {start // config.minibatch}")
            optimizer.step()
            for k, v in {**stats, "loss": loss_value}.items():
                totals[k] = totals.get(k, 0.0) + v
            steps += 1
    return {k: v / max(steps, 1) for k, v in totals.items()} | {
        "steps": float(steps), "rows": float(rows), "skipped_rows": float(skipped_rows),
        "skipped_steps": float(skipped_steps), "forwarded_tokens": float(forwarded)}


def fill_old_logprobs(policy: LoraValueModel, samples: Sequence[Sample], config: PPOConfig,
                      served: list[tuple[float, float]] | None = None) -> int:
    """Score π_old (the policy as it is, the checkpoint that sampled) for the rows whose sampler left it to the update
    (``old_logprobs`` not one per generated token); return the rows scored.

    A row the update will skip (`skips_zero_rows`, `has_signal`) is not scored. Rows that share a prefix forward it
    once (`swm.training.prefix`), in micro-batches of the update's token budget, with the forward the update's own
    first pass makes, so its first ratios are 1 within float rounding. ``served``, a list, is given a (served,
    torch) pair of temperature-1 log-probs for every scored token the server gave one of (`served_pairs`).
    """
    skip = skips_zero_rows(config)
    todo = [s for s in samples if len(s.old_logprobs) != s.generated and (has_signal(s) or not skip)]
    raw: list[list[float]] | None = [] if served is not None else None
    for sample, (logprobs, _) in zip(todo, score_rows(policy, todo, config, raw), strict=True):
        sample.old_logprobs = logprobs
    if served is not None and raw is not None:
        served += served_pairs([s.served_logprobs for s in todo], raw)
    return len(todo)


def served_pairs(served: Sequence[Sequence[float]], scored: Sequence[Sequence[float]]) -> list[tuple[float, float]]:
    """(served, torch) per token where the server gave a log-prob (not NaN), row by row (a row without any: [])."""
    return [(s, t) for row, raw in zip(served, scored, strict=True) if row
            for s, t in zip(row, raw, strict=True) if not math.isnan(s)]


def score_rows(policy: LoraValueModel, rows: Sequence[Sample], config: PPOConfig | None = None,
               raw: list[list[float]] | None = None) -> list[tuple[list[float], list[float]]]:
    """Each row's (log-probabilities, values) at its generated tokens under the policy as it is, without a gradient.

    Rows that share a prefix forward it once (`swm.training.prefix`, ``config.shared_prefix``), in micro-batches of
    ``config.micro_tokens``, with the forward the update's own first pass makes. ``raw``, a list, is given each
    row's log-probabilities at temperature 1 too, in row order (from the same forward: `LoraValueModel.score`).
    """
    config = config or PPOConfig()
    out: list[tuple[list[float], list[float]] | None] = [None] * len(rows)
    unscaled: list[list[float] | None] = [None] * len(rows)
    policy.model.eval()
    with torch.no_grad():
        for part, batch, prefix, _ in _micro_batches(policy, rows, config):
            kept: list[torch.Tensor] | None = [] if raw is not None else None
            logprobs, values = policy.score(batch, prefix=prefix, raw=kept)
            for i, lp, vs in zip(part, gather(logprobs, batch), gather(values, batch), strict=True):
                out[i] = (lp, vs)
            if kept:
                for i, lp in zip(part, gather(kept[0], batch), strict=True):
                    unscaled[i] = lp
    if raw is not None:
        raw += [row for row in unscaled if row is not None]
    return [row for row in out if row is not None]


def micro_rows(chunk: Sequence[Sample], tokens: int, after: int = 0) -> int:
    """Rows per forward/backward so that rows x the chunk's longest row stays within ``tokens`` (one at least).

    ``after``: the rows' first ``after`` tokens are a shared prefix forwarded once, so only the rest counts.
    """
    return max(1, min(len(chunk), tokens // max(len(s.sequence) - after for s in chunk)))


def make_optimizer(policy: LoraValueModel, config: PPOConfig) -> torch.optim.Optimizer:
    return torch.optim.AdamW(policy.parameters(), lr=config.lr)


def score_turns(policy: LoraValueModel, turns: list[SeatTurn]) -> list[tuple[list[float], list[float]]]:
    """Return each turn's (log-probability, value) at every generated token under ``policy``, 8 turns a batch."""
    out: list[tuple[list[float], list[float]]] = []
    for start in range(0, len(turns), 8):
        chunk = turns[start:start + 8]
        batch = collate([t.prompt_ids for t in chunk], [t.token_ids for t in chunk], policy.tokenizer.pad_token_id)
        with torch.no_grad():
            logprobs, values = policy.score(batch)
        out += list(zip(gather(logprobs, batch), gather(values, batch), strict=True))
    return out


def token_values(policy: LoraValueModel, rollouts: list[Rollout], config: PPOConfig | None = None,
                 served: list[tuple[float, float]] | None = None) -> None:
    """Fill every turn's ``values`` with the value head's value at each generated token, and its ``logprobs``
    (π_old) where the sampler left them to the update: one forward per seat whose turns append (its whole
    transcript, the group's shared prefix once), one per turn otherwise. ``served``, a list, is given a (served,
    torch) pair of temperature-1 log-probs for each token whose π_old this scored and the server gave one of."""
    config = config or PPOConfig()
    seats = [s for r in rollouts for s in r.seats if s.turns]
    rows: list[tuple[Sample, list[SeatTurn]]] = []
    for seat in seats:
        if len(seat.turns) > 1 and append_counts(seat.turns) == (len(seat.turns) - 1, len(seat.turns) - 1):
            rows.append((seat_sample(seat.role, seat.turns, every_turn=True), seat.turns))
        else:
            rows += [(turn_sample(seat.role, t), [t]) for t in seat.turns]
    raw: list[list[float]] | None = [] if served is not None else None
    scored = score_rows(policy, [row for row, _ in rows], config, raw)
    for k, ((_, turns), (lp, vs)) in enumerate(zip(rows, scored, strict=True)):
        unscaled = raw[k] if raw is not None else []
        for t in turns:
            n = len(t.token_ids)
            if len(t.logprobs) != n:
                t.logprobs = lp[:n]
                if served is not None:
                    served += served_pairs([served_of([t])], [unscaled[:n]])
            t.values, lp, vs, unscaled = vs[:n], lp[n:], vs[n:], unscaled[n:]
