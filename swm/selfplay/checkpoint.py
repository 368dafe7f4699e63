"""Atomic checkpoints of a self-play run: one directory per iteration, written whole or not at all.

``<run_dir>/checkpoints/iter-0003/`` holds the adapter, the value head, the optimiser state and
``meta.json`` (iteration, update statistics). It is written under a temporary name and renamed
into place (``os.replace``, atomic on one file system), and ``LATEST`` is replaced the same way,
so a run killed while saving finds either the previous checkpoint or the new one, never half of
one; a leftover temporary directory is removed on the next save.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swm.errors import InputError


def checkpoint_dir(run_dir: Path, iteration: int) -> Path:
    return run_dir / "checkpoints" / f"iter-{iteration:04d}"


def has_checkpoint(run_dir: Path, iteration: int) -> bool:
    return (checkpoint_dir(run_dir, iteration) / "meta.json").is_file()


def latest(run_dir: Path) -> int | None:
    """Return the iteration of the newest complete checkpoint, or None."""
    marker = run_dir / "checkpoints" / "LATEST"
    return int(marker.read_text().strip()) if marker.is_file() else None


def meta(run_dir: Path, iteration: int) -> dict[str, Any]:
    return dict(json.loads((checkpoint_dir(run_dir, iteration) / "meta.json").read_text()))


def save_atomic(run_dir: Path, iteration: int, write: Callable[[Path], None]) -> Path:
    """Write a checkpoint with ``write(tmp_dir)`` and rename it into place; an existing one is kept as is."""
    final = checkpoint_dir(run_dir, iteration)
    if has_checkpoint(run_dir, iteration):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    write(tmp)
    if not (tmp / "meta.json").is_file():
        raise RuntimeError(f"checkpoint writer left no meta.json in {tmp}")
    shutil.rmtree(final, ignore_errors=True)  # a directory without meta.json is not a checkpoint
    os.replace(tmp, final)
    marker = final.parent / "LATEST"
    marker_tmp = final.parent / "LATEST.tmp"
    marker_tmp.write_text(str(iteration))
    os.replace(marker_tmp, marker)
    return final


def warm_start_adapter(path: str | Path) -> Path:
    """Return the PEFT adapter folder a run starts from, given an adapter, a checkpoint or a run folder.

    Accepted: a PEFT adapter folder (``adapter_config.json``; what ``swm learn`` trains, e.g.
    ``<learn --out>/adapters/<version>``), a self-play checkpoint (``…/iter-NNNN``, its ``adapter/``),
    a self-play run folder (its latest checkpoint), or a ``swm learn`` output folder holding exactly
    one adapter under ``adapters/``. Anything else is refused in one line naming what was found.
    """

    folder = Path(path).expanduser()
    if (folder / "adapter_config.json").is_file():
        return folder
    if (folder / "adapter" / "adapter_config.json").is_file():
        return folder / "adapter"
    last = latest(folder)
    if last is not None:
        return checkpoint_dir(folder, last) / "adapter"
    found = sorted(p for p in (folder / "adapters").glob("*") if (p / "adapter_config.json").is_file())
    if len(found) == 1:
        return found[0]
    if found:
        raise InputError(f"{folder} holds {len(found)} adapters", "name one: --from "
                         + " or --from ".join(str(p) for p in found[:3]))
    raise InputError(f"no adapter at {folder}", "pass a PEFT adapter folder (adapter_config.json), a self-play "
                     "checkpoint or run folder, or a swm learn --out folder with one adapter")
