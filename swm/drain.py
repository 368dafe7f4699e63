"""SIGTERM and SIGHUP stop a run as Ctrl-C does: at the next step, with its checkpoint written.

Containers, schedulers (Kubernetes, Slurm, systemd) and a closed terminal send SIGTERM or SIGHUP,
not SIGINT; Python's default for both is to die at once, and as PID 1 in a container SIGTERM is
ignored altogether. `handling_signals` (entered by the CLI around every command) answers both with
LangGraph's own drain mechanism: the first signal calls ``RunControl.request_drain``, every graph
run through `checkpoints.run_thread` (or given `control()`) stops at its next superstep boundary
(model calls in flight finish and are checkpointed; nested graphs inherit the control), no new
item starts, and LangGraph raises ``GraphDrained``; the CLI says how to resume and exits 128 +
the signal (143 for SIGTERM, 129 for SIGHUP). A second signal stops at once, as a second Ctrl-C
would (`SignalInterrupt`, a KeyboardInterrupt): finished steps are still checkpointed. At once means
at once: the CLI exits without joining threads still waiting on a model or a database (`exit_now`),
and should the main thread itself be held, the process exits ``HARD_STOP_S`` after the signal.

Python runs a signal's handler in the main thread, between two bytecodes: a main thread held inside C
(libpq polling a frozen PostgreSQL for its 300 s statement bound, the signal itself delivered to
another thread) would answer neither signal. So the signals also reach a watcher thread, through
the interpreter's wakeup file descriptor (written by its C-level handler the moment a signal
arrives, whichever thread it lands on): the first arrival asks for the drain and says so, a later
one starts the hard stop, whether or not the main thread has run its handler yet. Each acts once.

LangGraph is imported only once a graph asks for the command's control (`control`, `stop_if_drained`,
`stop_for`): entering `handling_signals` installs the handlers and nothing more, so ``swm X --help``
loads no LangGraph (a signal before any graph asked is kept and handed to the control when it is made).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from langgraph.errors import GraphDrained
    from langgraph.runtime import RunControl

DRAINED_BY = (signal.SIGTERM, signal.SIGHUP)
HARD_STOP_S = 1.0  # after a second signal, the longest the main thread may take to say its line and exit
_active = False  # inside `handling_signals`
_control: RunControl | None = None  # made on first use by a graph (`control`)
_control_lock = threading.Lock()
_received: int | None = None
_cause: BaseException | None = None
_cause_reason: str | None = None
_cause_lock = threading.Lock()
_first_lock = threading.Lock()  # the first signal is acted on once, by the handler or the watcher
_handler_calls = 0  # calls of `_handle` in this command
_hard_stop_started = False

__all__ = ["GraphDrained", "SignalInterrupt", "control", "drained_by", "drained_exit_code", "exit_now",
           "handling_signals", "stop_for", "stop_if_drained"]


class SignalInterrupt(KeyboardInterrupt):
    """A second SIGTERM/SIGHUP: stop now, as a second Ctrl-C would."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def __getattr__(name: str) -> Any:
    if name == "GraphDrained":  # LangGraph's, re-exported: imported when asked for
        from langgraph.errors import GraphDrained  # noqa: PLC0415 - see the module's docstring

        return GraphDrained
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def control() -> RunControl | None:
    """Return the run control of the command in progress (None outside `handling_signals`), made on first use
    with any drain a signal already asked for."""
    global _control
    if not _active:
        return None
    with _control_lock:
        if _control is None:
            from langgraph.runtime import RunControl  # noqa: PLC0415 - see the module's docstring

            made = RunControl()
            _control = made
            reason = _cause_reason or (signal.Signals(_received).name if _received is not None else None)
            if reason is not None:
                made.request_drain(reason)
        return _control


def is_drained(exc: BaseException) -> bool:
    """Whether ``exc`` is LangGraph's ``GraphDrained`` (False while LangGraph is not loaded: none can be raised)."""
    errors = sys.modules.get("langgraph.errors")
    return errors is not None and isinstance(exc, errors.GraphDrained)


def stop_if_drained() -> None:
    """Raise ``GraphDrained`` if a drain was requested: a runner calls it before starting another item."""
    run = control()
    if run is not None and run.drain_requested:
        from langgraph.errors import GraphDrained  # noqa: PLC0415 - see the module's docstring

        raise GraphDrained(run.drain_reason or "shutdown")


def stop_for(cause: BaseException) -> bool:
    """Drain the command in progress as a signal would, because of ``cause``, the error it reports once drained.

    For a fault that lets the steps in flight finish and be checkpointed but must stop the run (the
    database's permissions taken away: the descriptors already open still write). Returns False
    outside a command (no drain to request): the caller raises ``cause`` instead.
    """
    global _cause, _cause_reason
    if not _active:
        return False
    with _cause_lock:
        if _cause is None:
            _cause, _cause_reason = cause, type(cause).__name__
            run = control()
            if run is not None:
                run.request_drain(_cause_reason)
    return True


def drained_by() -> BaseException | None:
    """Return the error the last command was drained for (`stop_for`); None when it was a signal, or not drained."""
    return _cause


def drained_exit_code(reason: str | None = None) -> int:
    """Return the exit code for a run drained by ``reason`` (a signal name): 128 + the signal, 130 by default."""
    try:
        return 128 + int(signal.Signals[reason or ""])
    except KeyError:
        return 130


def exit_now(code: int) -> NoReturn:
    """Exit with ``code`` without joining the threads still at work (a second signal: each may wait on a model or
    a database for as long as its bound)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _hard_stop(signum: int) -> None:
    print(f"{signal.Signals(signum).name} again: stopped at once; finished steps are checkpointed; rerun with the "
          "same --db and --thread-id to resume", file=sys.stderr, flush=True)
    exit_now(128 + signum)


def _first(signum: int) -> None:
    """Act on the command's first signal, once (from the main thread's handler or from the watcher)."""
    global _received
    with _first_lock:
        if _received is not None:
            return
        _received = signum
        name = signal.Signals(signum).name
        if _control is not None:  # else `control` hands it to the control when a graph asks for one
            _control.request_drain(name)
    print(f"{name}: stopping at the next step (model calls in flight finish and are checkpointed); "
          f"send it again to stop at once", file=sys.stderr, flush=True)


def _start_hard_stop(signum: int) -> None:
    """Exit ``HARD_STOP_S`` from now unless the main thread has exited first (started once)."""
    global _hard_stop_started
    with _first_lock:
        if _hard_stop_started:
            return
        _hard_stop_started = True
    stop = threading.Timer(HARD_STOP_S, _hard_stop, (signum,))
    stop.daemon = True
    stop.start()


def _handle(signum: int, frame: object) -> None:
    global _handler_calls
    if not _active:
        raise SignalInterrupt(signum)
    _handler_calls += 1
    if _handler_calls == 1 and not _hard_stop_started:
        _first(signum)  # a no-op when the watcher already acted on this arrival
        return
    _start_hard_stop(signum)  # the main thread may itself be held (a `finally` waiting on a server)
    raise SignalInterrupt(signum)


def _watch(read_fd: int) -> None:
    """Count signal arrivals from the wakeup descriptor: act on the first, start the hard stop on a later one."""
    arrivals = 0
    while True:
        try:
            data = os.read(read_fd, 64)
        except OSError:
            return
        if not data:  # the command ended: the write end is closed
            return
        for signum in data:
            if signum not in DRAINED_BY:
                continue
            arrivals += 1
            if arrivals == 1:
                _first(signum)
            else:
                _start_hard_stop(signum)


@contextmanager
def _watching() -> Iterator[None]:
    """Send arrivals of every signal to `_watch` for the duration of the block (main thread only)."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)  # the interpreter's C handler must never block on it
    try:
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:  # not the main thread
        os.close(read_fd)
        os.close(write_fd)
        yield
        return
    watcher = threading.Thread(target=_watch, args=(read_fd,), name="swm-signal-watcher", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous)
        os.close(write_fd)  # the watcher reads EOF and returns
        watcher.join(1.0)
        os.close(read_fd)


@contextmanager
def handling_signals() -> Iterator[None]:
    """Drain on SIGTERM and SIGHUP for the duration of one command (main thread only; a no-op elsewhere)."""
    global _active, _control, _received, _cause, _cause_reason, _handler_calls, _hard_stop_started
    if _active:  # a nested command group: the outer one already handles them
        yield
        return
    previous: dict[signal.Signals, Any] = {}
    _active, _control, _received, _cause, _cause_reason = True, None, None, None, None
    _handler_calls, _hard_stop_started = 0, False
    try:
        for signum in DRAINED_BY:
            if signal.getsignal(signum) is signal.SIG_IGN:  # started under nohup (or told to ignore it)
                continue
            try:
                previous[signum] = signal.signal(signum, _handle)
            except ValueError:  # not the main thread (a server's worker): its host handles signals
                break
        if previous:
            with _watching():
                yield
        else:
            yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _active, _control, _received = False, None, None
