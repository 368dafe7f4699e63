"""llama.cpp's own C++ server (``llama-server``): built once from the source llama-cpp-python ships.

`build` compiles only the ``llama-server`` target of the ``vendor/llama.cpp`` tree inside the
installed llama-cpp-python's source distribution (fetched with ``pip download``, or a local
sdist or tree given as ``source``), with the portable CPU flags `.ci/run` uses for
llama-cpp-python itself (``GGML_NATIVE=OFF``, AVX2: a native build's AMX kernels segfault on
Sapphire Rapids and later). The binary is static and lands in a per-user cache folder keyed
by llama-cpp-python's version (`binary_path`), with ``build.json`` saying how it was made.
``SWM_LLAMA_SERVER`` names another binary outright (one you built yourself); ``CMAKE_ARGS``
adds CMake flags after swm's own, as it does for llama-cpp-python.

`binary` returns the binary when it is there; `swm.serving.embedded` serves with it by default.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from importlib import metadata
from pathlib import Path

from swm.errors import InputError, ModelUnavailable

PACKAGE = "llama-cpp-python"
# The same CPU flags as llama-cpp-python's build in .ci/run, plus what a server-only build needs:
# static (one file to copy), no tests or examples, no web UI (its assets would be downloaded), no TLS.
CMAKE_FLAGS = ("-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
               "-DGGML_BMI2=ON", "-DBUILD_SHARED_LIBS=OFF", "-DCMAKE_BUILD_TYPE=Release",
               "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=ON",
               "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF")
HOW = "swm engine build"  # the one line that says how to get the server (README, "Install")


@functools.cache
def version() -> str:
    """Return the installed llama-cpp-python's version (the source the server is built from).

    Looked up once per process: `binary` needs it on every embedded request (`swm.serving.embedded.ensure_server`),
    and importlib.metadata scans the installed packages each time."""
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError as exc:
        raise ModelUnavailable("llama-cpp-python is not installed, so there is no llama.cpp source to build",
                               "pip install 'social-world-models[embedded]'") from exc


def cache_root() -> Path:
    """Return swm's per-user cache folder (``SWM_CACHE_DIR``, else ``swm`` in the XDG cache)."""
    return Path(os.environ.get("SWM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "swm"))


def dequantised_cache(gguf: Path) -> Path | None:
    """Return where `swm.training.base.load_base` keeps the dequantised checkpoint of ``gguf`` (None: unreadable)."""
    digest = hashlib.sha256()
    try:
        with gguf.open("rb") as f:
            while chunk := f.read(1 << 22):
                digest.update(chunk)
    except OSError:
        return None
    return cache_root() / "bases" / digest.hexdigest()[:32]


def cache_dir() -> Path:
    """Return the per-user folder of built servers (``SWM_CACHE_DIR``, else the XDG cache)."""
    return cache_root() / "llama-server"


def binary_path(for_version: str | None = None) -> Path:
    """Return where the server built from llama-cpp-python ``for_version`` (default: installed) lives."""
    return cache_dir() / (for_version or version()) / "llama-server"


def binary() -> Path | None:
    """Return the llama-server binary to serve with (``SWM_LLAMA_SERVER``, else the built one), or None."""
    named = os.environ.get("SWM_LLAMA_SERVER")
    if named:
        path = Path(named).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ModelUnavailable(f"SWM_LLAMA_SERVER={named} is not an executable file",
                                   f"unset it, or point it at a llama-server binary ({HOW} builds one)")
        return path
    try:
        path = binary_path()
    except ModelUnavailable:
        return None
    return path if path.is_file() else None


def _fetch_sdist(into: Path, want: str) -> Path:
    """Download llama-cpp-python's source distribution of version ``want`` into ``into`` (pip's cache first)."""
    cmd = [sys.executable, "-m", "pip", "download", f"{PACKAGE}=={want}", "--no-binary", ":all:", "--no-deps",
           "--quiet", "--dest", str(into)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(into.glob("llama_cpp_python-*.tar.gz"))
    if done.returncode != 0 or not found:
        tail = " ".join((done.stderr or done.stdout).split())[-300:]
        raise ModelUnavailable(f"cannot download the llama-cpp-python {want} source: {tail}",
                               "pass --source with its .tar.gz (pip download llama-cpp-python==VERSION "
                               "--no-binary :all: --no-deps)")
    return found[0]


def _llama_tree(source: Path, work: Path) -> Path:
    """Return the llama.cpp source tree in ``source`` (an sdist .tar.gz, its unpacked folder or llama.cpp itself)."""
    if source.is_file():
        with tarfile.open(source) as archive:
            archive.extractall(work, filter="data")
        unpacked = [p for p in work.iterdir() if p.is_dir()]
        source = unpacked[0] if len(unpacked) == 1 else work
    for tree in (source / "vendor" / "llama.cpp", source):
        if (tree / "tools" / "server" / "CMakeLists.txt").is_file():
            return tree
    raise InputError(f"{source} holds no llama.cpp source with tools/server",
                     "pass llama-cpp-python's sdist (.tar.gz) or its vendor/llama.cpp folder")


def _run(cmd: list[str], log: Path) -> None:
    with open(log, "a", encoding="utf-8") as out:
        out.write("$ " + shlex.join(cmd) + "\n")
        out.flush()
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:]
        raise ModelUnavailable(f"building llama-server failed ({shlex.join(cmd[:3])} …): {' '.join(tail)[:300]}",
                               f"see {log}")


def build(source: Path | None = None, jobs: int | None = None, force: bool = False,
          echo: object = None) -> dict[str, object]:
    """Build llama-server from llama-cpp-python's own llama.cpp source; return what ``build.json`` records."""
    want = version()
    out = binary_path(want)
    if out.is_file() and not force:
        return {**_record(out), "skipped": True}
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise ModelUnavailable(f"building llama-server needs {tool}, which is not on PATH",
                                   "install cmake and a C++ compiler (apt-get install cmake g++, or pip install cmake)")
    out.parent.mkdir(parents=True, exist_ok=True)
    log = out.parent / "build.log"
    log.write_text("", encoding="utf-8")
    jobs = jobs or os.cpu_count() or 2
    say = echo if callable(echo) else (lambda _text: None)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="swm-llama-build-") as tmp:
        work = Path(tmp)
        if source is None:
            say(f"downloading the llama-cpp-python {want} source …")
            source = _fetch_sdist(work / "sdist", want)
        tree = _llama_tree(Path(source), work / "src")
        build_dir = work / "build"
        extra = shlex.split(os.environ.get("CMAKE_ARGS", ""))
        say(f"configuring and compiling llama-server with {jobs} jobs (log: {log}) …")
        _run(["cmake", "-S", str(tree), "-B", str(build_dir), *CMAKE_FLAGS, *extra], log)
        _run(["cmake", "--build", str(build_dir), "--target", "llama-server", "--config", "Release",
              "-j", str(jobs)], log)
        built = build_dir / "bin" / "llama-server"
        if not built.is_file():
            raise ModelUnavailable(f"the build finished without {built}", f"see {log}")
        partial = out.with_name(out.name + f".partial-{os.getpid()}")
        shutil.copy2(built, partial)
        os.replace(partial, out)  # a half-copied binary is never found by `binary`
    record = {"llama_cpp_python": want, "binary": str(out), "seconds": round(time.perf_counter() - start, 1),
              "jobs": jobs, "cmake_flags": [*CMAKE_FLAGS, *extra], "source": str(source)}
    (out.parent / "build.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record


def _record(out: Path) -> dict[str, object]:
    try:
        return dict(json.loads((out.parent / "build.json").read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {"binary": str(out)}


if __name__ == "__main__":  # python -m swm.serving.engine [SOURCE]: the same as `swm engine build`
    print(json.dumps(build(Path(sys.argv[1]) if len(sys.argv) > 1 else None, echo=print), indent=2))
