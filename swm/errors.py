"""Errors a user can act on: each says what went wrong and what to do, in one line."""

from __future__ import annotations


class SWMError(Exception):
    """Base of every error swm raises on purpose; the CLI prints it as one line and exits 2."""

    exit_code = 2

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        return f"{self.message}" + (f" — {self.hint}" if self.hint else "")

    def __str__(self) -> str:
        return self.one_line()


class InputError(SWMError):
    """The user's input cannot be used (empty or oversized narrative, unknown agent, bad file)."""


class ModelUnavailable(SWMError):
    """The model endpoint cannot be reached or refused the request."""

    exit_code = 3


class ModelOutputError(SWMError):
    """The model answered, but not with anything usable after the allowed retries."""
