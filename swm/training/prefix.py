"""A shared prefix forwarded once: the G rollouts of a task open every seat's row with the same first prompt.

A group's rows (`prefix_groups`) share their first ``length`` tokens. `Prefix.forward` runs those tokens through
the model once and keeps each layer's keys and values; every row of the group then forwards only its own tokens,
with the prefix's keys and values expanded to the batch as its past (`LoraValueModel.score`'s ``prefix``). With a
gradient, the rows' micro-batches back-propagate into detached copies of the prefix's keys and values (their
``grad`` accumulates over every row of the group), and `Prefix.backward` sends that sum through the prefix's own
graph once: the update equals the one that forwards each row whole, within float rounding (a test checks it).

The prefix stops one token before the first generated token of any row (the position that predicts it is then the
row's own), so every row's loss is computed from its own tokens, as in the unshared path. Prefixes shorter than
`MIN_SHARED` tokens are not worth a pass of their own: their rows go with the rows that share nothing.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from transformers import DynamicCache

MIN_SHARED = 16


class Model(Protocol):
    """What `Prefix.forward` needs of a policy (`swm.training.policy.LoraValueModel`)."""

    model: Any

    @property
    def device(self) -> Any: ...

    def autocast(self) -> Any: ...


class Row(Protocol):
    @property
    def sequence(self) -> list[int]: ...

    @property
    def targets(self) -> list[tuple[int, int]]: ...


@dataclass(frozen=True)
class Group:
    """Rows (indices) that forward their first ``length`` tokens once (0: each row whole)."""

    rows: list[int]
    length: int


def shared_length(rows: Sequence[Row]) -> int:
    """The tokens every row opens with, ending before the position that predicts any row's first generated token."""
    seqs = [r.sequence for r in rows]
    n = min(len(s) for s in seqs)
    first = seqs[0]
    same = next((i for i in range(n) if any(s[i] != first[i] for s in seqs[1:])), n)
    starts = [a for r in rows for a, b in r.targets if b > a]
    return max(0, min(same, min(starts, default=n) - 1))


def prefix_groups(rows: Sequence[Row], share: bool = True) -> list[Group]:
    """Group the rows so that each group's shared prefix is forwarded once and the tokens forwarded are fewest.

    Rows are split where they first differ, as a prefix tree is, and a node is kept whole when forwarding its
    shared prefix once costs fewer tokens than its branches' own groups (a batch of tasks shares only the chat
    template's head, each task's G rollouts its whole first prompt). Prefixes shorter than `MIN_SHARED` are not
    shared: those rows (and every row when ``share`` is off) form one group of whole rows, in their order.
    """
    if not share or len(rows) < 2:
        return [Group(list(range(len(rows))), 0)] if rows else []
    groups = [g for g in _best(rows, list(range(len(rows))))[1] if g.length]
    shared = {i for g in groups for i in g.rows}
    whole = [i for i in range(len(rows)) if i not in shared]
    return [*groups, *([Group(whole, 0)] if whole else [])]


def _best(rows: Sequence[Row], members: list[int]) -> tuple[int, list[Group]]:
    """The fewest tokens to forward ``members`` and the groups that do it (a group of length 0: each row whole)."""
    whole = sum(len(rows[i].sequence) for i in members)
    if len(members) < 2:
        return whole, [Group(members, 0)]
    length = shared_length([rows[i] for i in members])
    kept = (length + whole - length * len(members), [Group(members, length)]) if length >= MIN_SHARED \
        else (whole, [Group(members, 0)])
    branches: dict[int, list[int]] = {}
    for i in members:
        seq = rows[i].sequence
        branches.setdefault(seq[length] if len(seq) > length else -1, []).append(i)
    if len(branches) < 2:  # they part only after a generated token: nothing to split on
        return kept
    split_cost, split = 0, []
    for branch in branches.values():
        cost, parts = _best(rows, branch)
        split_cost += cost
        split += parts
    return (split_cost, split) if split_cost < kept[0] else kept


def forwarded_tokens(rows: Sequence[Row], share: bool = True) -> int:
    """Tokens the model forwards for ``rows``: each group's prefix once, then every row's own tokens."""
    return sum(g.length + sum(len(rows[i].sequence) - g.length for i in g.rows) for g in prefix_groups(rows, share))


class Prefix:
    """One prefix's keys and values per layer, forwarded once; ``cache(rows)`` lends them to a batch of rows."""

    def __init__(self, pairs: list[tuple[torch.Tensor, torch.Tensor]], length: int, grad: bool) -> None:
        self.length = length
        self._graph = pairs if grad else []  # the prefix's own outputs, whose graph `backward` runs once
        self._pairs = [(k.detach().requires_grad_(grad), v.detach().requires_grad_(grad)) for k, v in pairs]

    @classmethod
    def forward(cls, policy: Model, ids: Sequence[int], grad: bool = False,
                reference: bool = False) -> Prefix:
        """Forward ``ids`` once under the policy (``reference``: its adapter disabled), keeping keys and values."""
        disabled = policy.model.disable_adapter() if reference else contextlib.nullcontext()
        with disabled, torch.set_grad_enabled(grad and not reference), policy.autocast():
            out = policy.model(input_ids=torch.tensor([list(ids)], device=policy.device), use_cache=True,
                               logits_to_keep=1)
        cache = getattr(out, "cache", None) or out.past_key_values
        return cls(list(_pairs(cache)), len(ids), grad and not reference)

    def cache(self, rows: int) -> Any:
        """A fresh cache holding the prefix for ``rows`` rows (a forward appends to its cache, so one a pass)."""
        return DynamicCache(ddp_cache_data=[(k.expand(rows, *k.shape[1:]), v.expand(rows, *v.shape[1:]))
                                            for k, v in self._pairs])

    def backward(self) -> None:
        """Send the gradient the rows left on the prefix's keys and values through the prefix's forward, once."""
        outputs, grads = [], []
        for (k, v), (lk, lv) in zip(self._graph, self._pairs, strict=True):
            for out, leaf in ((k, lk), (v, lv)):
                if leaf.grad is not None and out.requires_grad:
                    outputs.append(out)
                    grads.append(leaf.grad)
        if outputs:
            torch.autograd.backward(outputs, grads)
        self._graph = []


@functools.cache
def _cache_argument(forward: Any) -> str:
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def cache_argument(model: Any) -> str:
    """The name a model's forward takes its past under: ``cache`` from transformers 5.24, ``past_key_values``
    before (5.24 still takes it, with a warning that it goes in 5.40)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return _cache_argument(type(base).forward)


def _pairs(cache: Any) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    for layer in cache.layers:
        yield layer.keys, layer.values
