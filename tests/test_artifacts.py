"""The artifact table: files stored under a content key in the run's store, fetched whole and checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from swm.checkpoints import artifacts as art
from swm.checkpoints import open_store
from swm.errors import InputError


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "made"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(bytes(range(256)) * 40)  # 10,240 bytes: three parts of 4,096
    (folder / "config.json").write_text('{"r": 8}')
    (folder / "empty.txt").write_bytes(b"")
    return folder


def test_files_come_back_whole_from_parts_on_both_backends(db_target: Any, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(art, "PART", 4096)
    store, folder = open_store(db_target), _folder(tmp_path)
    names = ["weights.bin", "config.json", "empty.txt"]
    art.put_artifact(store, "k1", folder, names)
    art.put_artifact(store, "k1", folder, names)  # a second store of the same key adds nothing
    assert store.count(art.TABLE, "key = ?", ["k1"]) == 3 + 1 + 1
    into = art.fetch_artifact(store, "k1", tmp_path / "back" / "k1")
    assert {p.name: p.read_bytes() for p in into.iterdir()} == {n: (folder / n).read_bytes() for n in names}
    assert [p.name for p in (tmp_path / "back").iterdir()] == ["k1"], "no partial folder is left behind"


def test_a_damaged_part_or_a_missing_key_is_one_line_and_writes_nothing(db_target: Any, tmp_path: Path) -> None:
    store, folder = open_store(db_target), _folder(tmp_path)
    art.put_artifact(store, "k2", folder, ["weights.bin"])
    store.execute(f"update {art.TABLE} set data = ? where key = ?", [b"\x00" * 10_240, "k2"])
    with pytest.raises(art.ArtifactCorrupt) as caught:
        art.fetch_artifact(store, "k2", tmp_path / "k2")
    assert caught.value.exit_code == 2 and "weights.bin" in caught.value.one_line()
    assert not (tmp_path / "k2").exists() and not list(tmp_path.glob("k2.partial*"))
    with pytest.raises(InputError, match="not in the run's store"):
        art.fetch_artifact(store, "nope", tmp_path / "nope")
