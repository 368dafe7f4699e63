"""Each sampled turn of a rollout kept as it comes, so a killed run pays no turn twice.

A rollout is stored whole once it ends (`swm.selfplay.store.put_rollout`): until then its turns lived only in the
process, and a run killed mid-iteration sampled them again on resume — with a paid endpoint or a served sampler,
each a request paid twice (11 of 53 after five kill -9 of two-seat self-play). `journalled` wraps the rollout's
sampler: every reply is written to ``selfplay_turn_journal`` (keyed by rollout and call) before the rollout goes
on, and a rollout played again after a kill takes its first replies from there instead of the sampler, as long as
each was asked for the same prompt. The journal's rows go once the rollout is stored (`forget`).

What a replay keeps: a reply taken from the journal still advances the sampler's call counter (``calls``), so the
replies after it are drawn with the seeds an uninterrupted run uses (the torch sampler and per-request seeded
draws give the same tokens). A ``seat`` draw (llama-server's per-slot random state, `swm.serving.draws`) cannot be
put back: the first reply sampled after replayed ones is drawn from a fresh slot, and the rollout says so
(`Rollout.journal_turns` > 0 with the sampler's spec).
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from swm.checkpoints.store import StoreRecords
from swm.tasks.decisions import Stop
from swm.training.trajectory import Generation
from swm.training.transcript import SeatChat, takes_chat

JOURNAL = "selfplay_turn_journal"


class _Journalled:
    """A sampler whose replies are journalled under ``rollout_id`` and replayed from there when present."""

    def __init__(self, inner: Any, store: StoreRecords, rollout_id: str) -> None:
        self.inner = inner
        self.store = store
        self.rollout_id = rollout_id
        self.calls = 0
        self.replayed = 0  # replies taken from the journal in this play

    def _asked(self, prompt: str, prefill: str, chat: SeatChat | None) -> str:
        """A digest of what this call is asked: the seat's chat so far (messages and ids), the prompt, the prefill."""
        before = [chat.messages, chat.ids] if chat is not None else None
        return hashlib.sha256(json.dumps([before, prompt, prefill]).encode()).hexdigest()

    def _turn(self, prompt: str, prefill: str, chat: SeatChat | None, sample: Any) -> Generation:
        key, asked = f"{self.rollout_id}#{self.calls}", self._asked(prompt, prefill, chat)
        self.calls += 1
        found = list(self.store.rows(f"select asked, generation from {JOURNAL} where key = ?", [key])) \
            if self.store.has_table(JOURNAL) else []
        if found and found[0]["asked"] == asked:
            if hasattr(self.inner, "calls"):  # the replies after this one keep the seeds of an uninterrupted run
                self.inner.calls += 1
            self.replayed += 1
            return Generation.model_validate_json(found[0]["generation"])
        gen: Generation = sample()
        self.store.insert(JOURNAL, {"key": key, "rollout_id": self.rollout_id, "asked": asked,
                                    "generation": gen.model_dump_json(), "created": time.time()},
                          pk="key", replace=True)
        return gen


class _Plain(_Journalled):
    def generate(self, prompt: str, prefill: str = "", stop: Stop = None, max_tokens: int | None = None) -> Generation:
        return self._turn(prompt, prefill, None, lambda: self.inner.generate(prompt, prefill=prefill, stop=stop,
                                                                             max_tokens=max_tokens))


class _Chat(_Journalled):
    def generate(self, prompt: str, prefill: str = "", stop: Stop = None, max_tokens: int | None = None,
                 chat: SeatChat | None = None) -> Generation:
        return self._turn(prompt, prefill, chat, lambda: self.inner.generate(prompt, prefill=prefill, stop=stop,
                                                                             max_tokens=max_tokens, chat=chat))


def journalled(inner: Any, store: StoreRecords, rollout_id: str) -> _Plain | _Chat:
    """Wrap ``inner`` so each of its replies for ``rollout_id`` is journalled, and replayed on a rerun (it takes a
    seat's chat exactly when ``inner`` does)."""
    return (_Chat if takes_chat(inner) else _Plain)(inner, store, rollout_id)


def forget(store: StoreRecords, rollout_id: str) -> None:
    """Delete a stored rollout's journal (its turns are in the rollout now)."""
    if store.has_table(JOURNAL):
        store.execute(f"delete from {JOURNAL} where rollout_id = ?", [rollout_id])


def forget_prefix(store: StoreRecords, prefix: str) -> None:
    """Delete the journal of every rollout whose id starts with ``prefix`` (rollouts dropped to be played again)."""
    if store.has_table(JOURNAL):
        store.execute(f"delete from {JOURNAL} where rollout_id like ? escape '!'",
                      [prefix.replace("!", "!!").replace("%", "!%").replace("_", "!_") + "%"])
