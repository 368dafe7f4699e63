"""Long runs and failed items: record an item that failed after its retries, go on, stop when all fail.

A benchmark or lifelong run catches `ModelCallFailed` per item (question, episode): the item is
stored as failed with its one-line error and the run goes on; a rerun with the same thread
retries only the failed items. When ``limit`` items fail in a row the endpoint is not having a
bad minute but is down or stuck, so `FailureStreak` stops the run with `ModelUnavailable`
instead of spending (retries + 1) × timeout on every remaining item.
"""

from __future__ import annotations

import threading

from swm.errors import ModelUnavailable

DEFAULT_LIMIT = 5


class FailureStreak:
    """Count items that failed in a row (thread-safe); raise once ``limit`` is reached (0: never)."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = limit
        self.in_a_row = 0
        self.total = 0
        self._lock = threading.Lock()

    def success(self) -> None:
        with self._lock:
            self.in_a_row = 0

    def failure(self, error: str) -> None:
        """Count a failed item; raise `ModelUnavailable` when it makes ``limit`` in a row."""
        with self._lock:
            self.in_a_row += 1
            self.total += 1
            stop = 0 < self.limit <= self.in_a_row
            count = self.in_a_row
        if stop:
            raise ModelUnavailable(f"{count} items in a row failed, so the run stopped (last: {error})",
                                   "check the endpoint, then rerun with the same --db and --thread-id: finished "
                                   "items are kept and failed ones are retried")
