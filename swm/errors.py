"""Errors a user can act on: each says what went wrong and what to do, in one line."""

from __future__ import annotations

from swm.credentials import redact_text


class SWMError(RuntimeError):
    """Base of every error swm raises on purpose; the CLI prints it as one line and exits 2.

    A RuntimeError, so `langgraph dev` and the server hand its one line to the client instead of
    "An internal error occurred" (they pass on the messages of builtin errors only).
    """

    exit_code = 2

    def __init__(self, message: str, hint: str = "") -> None:
        message, hint = redact_text(message), redact_text(hint)  # a key in an endpoint URL is never printed
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        return f"{self.message}" + (f" — {self.hint}" if self.hint else "")

    def __str__(self) -> str:
        return self.one_line()


class InputError(SWMError, ValueError):
    """The user's input cannot be used (empty or oversized narrative, unknown agent, bad file).

    A ValueError too, as bad input is in Python.
    """


class ModelSpecError(SWMError, ValueError):
    """A model spec cannot be used as written: a base URL with no scheme, a provider whose LangChain
    package is not installed, a missing API key. Found before the first model call; exit 2.
    """


class ModelUnavailable(SWMError):
    """The model endpoint cannot be reached or refuses every request (down, wrong URL, bad key).

    Nothing a later item could do differently: a long run stops here, keeping what it finished.
    """

    exit_code = 3


class ModelCallFailed(SWMError):
    """One model call failed after the client's retries: HTTP 429/5xx, a dropped connection, a reply
    that is not JSON, a request the server refused.

    A benchmark or lifelong run records the item it belongs to as failed, with this message, and
    goes on; a rerun with the same thread retries only the failed items.
    """

    exit_code = 3


class NotAChatCompletion(ModelCallFailed):
    """The endpoint answered HTTP 200 with something that is not a chat completion (an HTML page, an
    event stream nobody asked for, a body that is not JSON, tool arguments encoded twice).

    Retried like a transient fault (the OpenAI client does not, since the status was 200), then the
    item fails as for any `ModelCallFailed`.
    """


class ModelTimeout(ModelCallFailed):
    """The model did not answer within the timeout, on every attempt."""


class ItemsFailed(SWMError):
    """A long run finished every item it could, but some still failed after their retries.

    Raised after the report and exports are written, so the run's exit status (3) says what a
    script must know: the results are incomplete, and a rerun with the same thread retries only
    the failed items. One rule for every command (docs/errors.md).
    """

    exit_code = 3


class ModelOutputError(SWMError):
    """The model answered, but not with anything usable after the allowed attempts."""

    exit_code = 4


class NoSocialState(ModelOutputError):
    """An S3AP-mode question was not answered: the story's social state could not be parsed, and the
    caller did not allow an answer from the story alone (``swm ask --allow-without-state``). Exit 6,
    so a script tells it from an answer that stood on no state.
    """

    exit_code = 6


class EnvironmentFault(SWMError):
    """What the run stands on failed: its database file (deleted, replaced, full, read-only), the database
    server (connection lost, statement timeout) or its workers (a dead Ray node).

    No later item could do better, so a long run stops here instead of recording every remaining
    item as failed; finished steps are checkpointed and resume once the cause is fixed. Exit 2
    when the user must change something (space, permissions, the file), 3 when a service is down.
    """
