"""`swm engine build`'s choice between linking llama-cpp-python's libraries and a static build.

The real shared build runs in `scripts/install` (CI's first command), and every llama-server test then serves
with what it built; these tests hold the choice and the fallback, with the compiler replaced by a stand-in.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from swm.errors import ModelUnavailable
from swm.serving import engine

INSTALL_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"


def test_the_install_commands_flags_ask_for_the_wheels_ggml_and_a_native_one_does_not() -> None:
    assert not engine._ggml_flags_differ(shlex.split(INSTALL_ARGS))
    assert not engine._ggml_flags_differ(["-DLLAMA_CURL=OFF"])
    assert engine._ggml_flags_differ(["-DGGML_NATIVE=ON"])
    assert engine._ggml_flags_differ([*shlex.split(INSTALL_ARGS), "-DGGML_AVX512=ON"])


def test_the_installed_wheel_ships_every_library_a_shared_build_links() -> None:
    pytest.importorskip("llama_cpp")
    libs = engine.wheel_libraries()
    assert libs is not None, "llama-cpp-python's wheel no longer ships its libraries: swm engine build goes static"
    assert all(libs[name].is_file() for name in engine.SHARED_LIBS)
    assert (libs["prefix"] / "lib" / "cmake" / "llama" / "llama-config.cmake").is_file()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A llama.cpp tree as far as `_llama_tree` looks."""
    source = tmp_path / "llama.cpp"
    (source / "tools" / "server").mkdir(parents=True)
    (source / "tools" / "server" / "CMakeLists.txt").write_text("")
    return source


@pytest.fixture
def wheel(tmp_path: Path) -> dict[str, Path]:
    folder = tmp_path / "wheel"
    folder.mkdir()
    libs = {"prefix": folder}
    for name in engine.SHARED_LIBS:
        (folder / name).write_bytes(name.encode())
        libs[name] = folder / name
    return libs


def _static_compiler(calls: list[list[str]]):  # type: ignore[no-untyped-def]
    def run(cmd: list[str], log: Path) -> None:
        calls.append(cmd)
        if "--build" in cmd:
            built = Path(cmd[cmd.index("--build") + 1]) / "bin" / "llama-server"
            built.parent.mkdir(parents=True, exist_ok=True)
            built.write_text("static")
    return run


def test_a_failed_shared_build_falls_back_to_static_and_says_so(tree: Path, wheel: dict[str, Path], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CMAKE_ARGS", INSTALL_ARGS)
    monkeypatch.setattr(engine, "wheel_libraries", lambda: wheel)
    monkeypatch.setattr(engine.shutil, "which", lambda tool: f"/usr/bin/{tool}")

    def fails(*_args: object) -> Path:
        raise ModelUnavailable("building llama-server failed (cmake --build …): undefined reference", "see log")

    calls: list[list[str]] = []
    monkeypatch.setattr(engine, "_build_shared", fails)
    monkeypatch.setattr(engine, "_run", _static_compiler(calls))
    said: list[str] = []
    record = engine.build(tree, jobs=1, force=True, echo=said.append)
    assert record["link"] == "static" and "libraries" not in record
    assert any("shared build failed" in line and "building static" in line for line in said), said
    assert Path(str(record["binary"])).read_text() == "static"
    assert not any(Path(str(record["binary"])).with_name(n).exists() for n in engine.SHARED_LIBS)
    assert "-DBUILD_SHARED_LIBS=OFF" in calls[0], "the static build's own flags"
    with pytest.raises(ModelUnavailable, match="undefined reference"):
        engine.build(tree, jobs=1, force=True, link="shared")


def test_a_shared_build_installs_its_libraries_beside_the_binary(tree: Path, wheel: dict[str, Path], tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CMAKE_ARGS", raising=False)
    monkeypatch.setattr(engine, "wheel_libraries", lambda: wheel)
    monkeypatch.setattr(engine.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    projects: list[str] = []

    def compiles(cmd: list[str], log: Path) -> None:
        if "-S" in cmd:
            projects.append((Path(cmd[cmd.index("-S") + 1]) / "CMakeLists.txt").read_text())
        else:
            built = Path(cmd[cmd.index("--build") + 1]) / "bin" / "llama-server"
            built.parent.mkdir(parents=True, exist_ok=True)
            built.write_text("shared")

    monkeypatch.setattr(engine, "_run", compiles)
    record = engine.build(tree, jobs=1, force=True)
    binary = Path(str(record["binary"]))
    assert record["link"] == "shared" and binary.read_text() == "shared"
    assert [binary.with_name(n).read_bytes() for n in engine.SHARED_LIBS] == [n.encode() for n in engine.SHARED_LIBS]
    assert json.loads((binary.parent / "build.json").read_text())["link"] == "shared"
    project = projects[0]
    assert "@" not in project.replace("\\$ORIGIN", ""), "every placeholder filled"
    assert tree.as_posix() in project and str(wheel["libmtmd.so.0"]) in project
    # a CMAKE_ARGS that asks for another ggml builds static: the wheel's ggml would silently stand in for it
    monkeypatch.setenv("CMAKE_ARGS", "-DGGML_NATIVE=ON")
    monkeypatch.setattr(engine, "_run", _static_compiler([]))
    assert engine.build(tree, jobs=1, force=True)["link"] == "static"
