"""llama.cpp's own C++ server (``llama-server``): built once from the source llama-cpp-python ships.

`build` compiles only the ``llama-server`` target of the ``vendor/llama.cpp`` tree inside the
installed llama-cpp-python's source distribution (fetched with ``pip download``, or a local
sdist or tree given as ``source``), with the portable CPU flags `.ci/run` uses for
llama-cpp-python itself (``GGML_NATIVE=OFF``, AVX2: a native build's AMX kernels segfault on
Sapphire Rapids and later). By default (``link="auto"``) only the server's own sources are compiled and
linked to the llama.cpp libraries the installed wheel ships (the same source, compiled once by pip; copied
beside the binary, found through its ``$ORIGIN`` rpath); ``link="static"`` compiles the whole tree into one
file. The binary lands in a per-user cache folder keyed by llama-cpp-python's version (`binary_path`), with
``build.json`` saying how it was made.
``SWM_LLAMA_SERVER`` names another binary outright (one you built yourself); ``CMAKE_ARGS``
adds CMake flags after swm's own, as it does for llama-cpp-python.

`binary` returns the binary when it is there; `swm.serving.embedded` serves with it by default.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
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
from typing import Any

from swm.errors import InputError, ModelUnavailable

PACKAGE = "llama-cpp-python"
# The same CPU flags as llama-cpp-python's build in .ci/run, plus what a server-only build needs:
# static (one file to copy), no tests or examples, no web UI (its assets would be downloaded), no TLS.
CMAKE_FLAGS = ("-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
               "-DGGML_BMI2=ON", "-DBUILD_SHARED_LIBS=OFF", "-DCMAKE_BUILD_TYPE=Release",
               "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=ON",
               "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF")
# The libraries llama-cpp-python's wheel installs (sonames): a shared build of llama-server links these instead of
# compiling llama.cpp a second time, and they are copied beside the binary (its DT_RPATH is $ORIGIN).
SHARED_LIBS = ("libllama.so.0", "libllama-common.so.0", "libmtmd.so.0", "libggml.so.0", "libggml-base.so.0",
               "libggml-cpu.so.0")
# A CMake project over the llama.cpp tree that builds only the server's own sources (tools/server, its HTTP library
# and the UI stub) and imports llama, llama-common and mtmd from the installed wheel, compiled by the same
# llama-cpp-python version from the same source. llama-common's public definition LLAMA_SUBPROCESS (on, on Linux)
# is repeated so that its structs have the layout the library was built with.
SHARED_PROJECT = """cmake_minimum_required(VERSION 3.14)
project(swm_llama_server C CXX)
set(LLAMA_SRC "@SRC@")
set(PROJECT_SOURCE_DIR "${LLAMA_SRC}")
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(BUILD_SHARED_LIBS OFF)
set(LLAMA_BUILD_COMMON ON)
function(llama_add_compile_flags)
endfunction()
function(license_add_file NAME FILE)
endfunction()
find_package(Threads REQUIRED)
find_package(llama REQUIRED PATHS "@PREFIX@/lib/cmake/llama" NO_DEFAULT_PATH)
add_subdirectory("${LLAMA_SRC}/vendor" vendor)
add_library(llama-common SHARED IMPORTED)
set_target_properties(llama-common PROPERTIES IMPORTED_LOCATION "@COMMON@"
    INTERFACE_INCLUDE_DIRECTORIES "${LLAMA_SRC}/common"
    INTERFACE_COMPILE_DEFINITIONS "LLAMA_SUBPROCESS;LLAMA_SHARED"
    INTERFACE_LINK_LIBRARIES "llama;vendor::nlohmann;vendor::sheredom;Threads::Threads")
add_library(mtmd SHARED IMPORTED)
set_target_properties(mtmd PROPERTIES IMPORTED_LOCATION "@MTMD@"
    INTERFACE_INCLUDE_DIRECTORIES "${LLAMA_SRC}/tools/mtmd"
    INTERFACE_LINK_LIBRARIES "llama")
add_subdirectory("${LLAMA_SRC}/tools/ui" ui)
add_subdirectory("${LLAMA_SRC}/tools/server" server)
set_target_properties(llama-server PROPERTIES BUILD_WITH_INSTALL_RPATH ON INSTALL_RPATH "\\$ORIGIN"
    INSTALL_RPATH_USE_LINK_PATH OFF)
target_link_options(llama-server PRIVATE "-Wl,--disable-new-dtags" "-Wl,-rpath-link,@LIBDIR@")
"""
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


@functools.lru_cache(maxsize=64)
def _sha256_of(path: Path, size: int, mtime: int) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def file_digest(path: Path) -> str:
    """Return a file's SHA-256 (hex), read once per (path, size, modification time) in a process: the key of every
    cache kept for a model file (its dequantised checkpoint, its served formats)."""
    stat = path.stat()
    return _sha256_of(path.resolve(), stat.st_size, stat.st_mtime_ns)


def dequantised_cache(gguf: Path) -> Path | None:
    """Return where `swm.training.base.load_base` keeps the dequantised checkpoint of ``gguf`` (None: unreadable)."""
    try:
        return cache_root() / "bases" / file_digest(gguf)[:32]
    except OSError:
        return None


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


def wheel_libraries() -> dict[str, Path] | None:
    """The installed llama-cpp-python's libraries by soname (`SHARED_LIBS`) and its CMake package folder
    (``prefix``), or None where the wheel does not ship them all (an older llama-cpp-python, another layout)."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.origin:
        return None
    package = Path(spec.origin).parent
    prefix = package.parent
    found: dict[str, Path] = {"prefix": prefix}
    for name in SHARED_LIBS:
        where = [d / name for d in (package / "lib", prefix / "lib") if (d / name).is_file()]
        if not where:
            return None
        found[name] = where[0]
    return found if (prefix / "lib" / "cmake" / "llama" / "llama-config.cmake").is_file() else None


def _ggml_flags_differ(extra: list[str]) -> bool:
    """Whether ``CMAKE_ARGS`` asks for a ggml other than the portable one swm builds (the wheel's, if it was built
    by scripts/install): a shared build would silently use the wheel's ggml instead."""
    ours = {f.split("=", 1)[0]: f for f in CMAKE_FLAGS}
    return any(f.startswith("-DGGML_") and ours.get(f.split("=", 1)[0]) != f for f in extra)


def _build_shared(tree: Path, work: Path, libs: dict[str, Path], jobs: int, log: Path) -> Path:
    """Compile only llama-server's own sources against the wheel's libraries; return the built binary."""
    project = work / "shared"
    project.mkdir()
    text = (SHARED_PROJECT.replace("@SRC@", tree.as_posix()).replace("@PREFIX@", libs["prefix"].as_posix())
            .replace("@COMMON@", libs["libllama-common.so.0"].as_posix())
            .replace("@MTMD@", libs["libmtmd.so.0"].as_posix())
            .replace("@LIBDIR@", ":".join(sorted({libs[n].parent.as_posix() for n in SHARED_LIBS}))))
    (project / "CMakeLists.txt").write_text(text, encoding="utf-8")
    build_dir = work / "build-shared"
    flags = ["-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
             "-DLLAMA_OPENSSL=OFF"]
    _run(["cmake", "-S", str(project), "-B", str(build_dir), *flags], log)
    _run(["cmake", "--build", str(build_dir), "--target", "llama-server", "--config", "Release", "-j", str(jobs)],
         log)
    built = next((p for p in sorted(build_dir.rglob("llama-server")) if p.is_file()), None)
    if built is None:
        raise ModelUnavailable(f"the shared build finished without llama-server in {build_dir}", f"see {log}")
    return built


def _install(built: Path, out: Path, libs: dict[str, Path] | None) -> None:
    """Copy the binary (and, for a shared build, the libraries it loads) into its cache folder, atomically: a
    half-copied binary is never found by `binary`, and its libraries are in place before it is."""
    if libs is not None:
        for name in SHARED_LIBS:
            partial = out.with_name(name + f".partial-{os.getpid()}")
            shutil.copy2(libs[name], partial)
            os.replace(partial, out.with_name(name))
    partial = out.with_name(out.name + f".partial-{os.getpid()}")
    shutil.copy2(built, partial)
    os.replace(partial, out)


def _linked_libraries(link: str, want: str, extra: list[str], say: Any) -> dict[str, Path] | None:
    """The wheel's libraries a ``link`` build links (`wheel_libraries`), or None for a static build."""
    libs = wheel_libraries() if link != "static" else None
    if link == "shared" and libs is None:
        raise ModelUnavailable(f"the installed llama-cpp-python {want} ships no llama-config.cmake and "
                               f"{', '.join(SHARED_LIBS)} to link", "build with --link static")
    if link == "auto" and libs is not None and _ggml_flags_differ(extra):
        say("CMAKE_ARGS asks for another ggml than the installed llama-cpp-python's: building static")
        return None
    return libs


def _build_static(tree: Path, work: Path, extra: list[str], jobs: int, log: Path) -> Path:
    """Compile the whole llama.cpp tree's llama-server target into one file; return the built binary."""
    build_dir = work / "build"
    _run(["cmake", "-S", str(tree), "-B", str(build_dir), *CMAKE_FLAGS, *extra], log)
    _run(["cmake", "--build", str(build_dir), "--target", "llama-server", "--config", "Release", "-j", str(jobs)],
         log)
    built = build_dir / "bin" / "llama-server"
    if not built.is_file():
        raise ModelUnavailable(f"the build finished without {built}", f"see {log}")
    return built


def build(source: Path | None = None, jobs: int | None = None, force: bool = False,
          echo: object = None, link: str = "auto") -> dict[str, object]:
    """Build llama-server from llama-cpp-python's own llama.cpp source; return what ``build.json`` records.

    ``link``: ``shared`` compiles only the server's own sources and links the installed wheel's llama, common,
    mtmd and ggml libraries (copied beside the binary): llama.cpp is compiled once, by pip; ``static`` compiles
    the whole tree into one file; ``auto`` (the default) is shared where the wheel ships its libraries and
    ``CMAKE_ARGS`` asks for no other ggml, and falls back to static if the shared build fails."""
    if link not in ("auto", "shared", "static"):
        raise InputError(f"link must be auto, shared or static, not {link!r}")
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
        extra = shlex.split(os.environ.get("CMAKE_ARGS", ""))
        libs = _linked_libraries(link, want, extra, say)
        built = None
        if libs is not None:
            say(f"compiling llama-server's own sources against llama-cpp-python {want}'s libraries with {jobs} jobs "
                f"(log: {log}) …")
            try:
                built = _build_shared(tree, work, libs, jobs, log)
            except ModelUnavailable as exc:
                if link == "shared":
                    raise
                say(f"the shared build failed ({exc}): building static")
                libs = None
        if built is None:
            say(f"configuring and compiling llama-server with {jobs} jobs (log: {log}) …")
            built = _build_static(tree, work, extra, jobs, log)
        _install(built, out, libs)
    record: dict[str, object] = {
        "llama_cpp_python": want, "binary": str(out), "seconds": round(time.perf_counter() - start, 1),
        "jobs": jobs, "link": "shared" if libs is not None else "static",
        "cmake_flags": [*CMAKE_FLAGS, *extra] if libs is None else [], "source": str(source),
        **({"libraries": [str(out.with_name(n)) for n in SHARED_LIBS]} if libs is not None else {})}
    (out.parent / "build.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record


def _record(out: Path) -> dict[str, object]:
    try:
        return dict(json.loads((out.parent / "build.json").read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {"binary": str(out)}


if __name__ == "__main__":  # python -m swm.serving.engine [SOURCE]: the same as `swm engine build`
    print(json.dumps(build(Path(sys.argv[1]) if len(sys.argv) > 1 else None, echo=print), indent=2))
