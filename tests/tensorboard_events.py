"""Read TensorBoard event files back without TensorBoard: the scalars a run logged, by tag and step.

An event file is a sequence of TFRecords (an 8-byte length, its 4-byte CRC, the serialised ``Event``, the
data's 4-byte CRC); the ``Event`` protobuf comes with tensorboardX (or with tensorboard). CRCs are not checked:
the files are the test's own.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest


def _event_class() -> Any:
    try:
        from tensorboardX.proto.event_pb2 import Event
    except ImportError:
        try:
            from tensorboard.compat.proto.event_pb2 import Event
        except ImportError:
            pytest.skip("neither tensorboardX nor tensorboard is installed")
    return Event


def read_scalars(folder: Path) -> dict[str, dict[int, float]]:
    """Return every scalar under ``folder``'s event files (recursively): tag → step → value (the last one logged)."""
    event_class = _event_class()
    out: dict[str, dict[int, float]] = {}
    for path in sorted(Path(folder).rglob("events.out.tfevents.*")):
        data, i = path.read_bytes(), 0
        while i + 12 <= len(data):
            (length,) = struct.unpack("<Q", data[i:i + 8])
            event = event_class()
            event.ParseFromString(data[i + 12:i + 12 + length])
            i += 12 + length + 4
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    out.setdefault(value.tag, {})[int(event.step)] = value.simple_value
    return out


def needs_tensorboard() -> None:
    """Skip unless a TensorBoard writer is installed (`swm.tracking`'s tensorboard row)."""
    from swm.tracking import reporter_missing

    if reporter_missing("tensorboard"):
        pytest.skip("no TensorBoard writer installed (tensorboardX or tensorboard)")
