"""A trained policy's adapter, kept in the run's store and found again wherever the run resumes.

`keep_adapter` stores a freshly trained PEFT adapter in the experience store under its content
hash (`swm.serving.verify.adapter_sha256`, which the `PolicyVersion` records as
``adapter_sha256``) through `checkpoints.artifacts`. `local_adapter` returns a folder that holds
exactly that content: the folder it was trained in when it is still there, else a copy restored
from the store into this invocation's ``--out`` (``adapters/<version>``) — after the output folder
was deleted, or on another machine resuming the thread against the same PostgreSQL. A folder
whose content differs from the recorded hash is refused in one line, never served.
"""

from __future__ import annotations

import threading
from pathlib import Path

from swm.checkpoints.artifacts import ArtifactCorrupt, fetch_artifact, put_artifact
from swm.checkpoints.store import StoreRecords
from swm.lifelong.update import PolicyVersion
from swm.serving.gguf_lora import ADAPTER_META
from swm.serving.verify import adapter_sha256

# what a policy's adapter folder holds: PEFT's two files, the base's metadata the GGUF conversion
# reads, and the training stats and settings a rerun reads to reuse a finished adapter
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", ADAPTER_META, "train.json", "settings.json")
_restoring = threading.Lock()  # parallel episodes of one policy restore it once
_hashes: dict[tuple[str, int, int, int, int], str] = {}


def content_hash(folder: Path) -> str | None:
    """Return the adapter's content hash (None when its weights or config are missing), memoised per file state."""
    files = [Path(folder) / "adapter_config.json", Path(folder) / "adapter_model.safetensors"]
    if not all(f.is_file() for f in files):
        return None
    stats = [f.stat() for f in files]
    key = (str(Path(folder).resolve()), stats[0].st_size, stats[0].st_mtime_ns, stats[1].st_size,
           stats[1].st_mtime_ns)
    if key not in _hashes:
        _hashes[key] = adapter_sha256(folder)
    return _hashes[key]


def keep_adapter(store: StoreRecords, folder: Path) -> str:
    """Store a trained adapter's files in the run's store (once per content); return its content hash."""
    sha = adapter_sha256(folder)
    put_artifact(store, sha, folder, [n for n in ADAPTER_FILES if (Path(folder) / n).is_file()])
    return sha


def _refuse_changed(folder: Path, policy: PolicyVersion, found: str | None) -> ArtifactCorrupt:
    what = "has no adapter files" if found is None else f"holds adapter {found[:12]}"
    return ArtifactCorrupt(f"the adapter folder {folder} of policy {policy.version} {what}, not the trained "
                           f"adapter {str(policy.adapter_sha256)[:12]} the run recorded",
                           "delete that folder: the recorded adapter is restored from the run's store")


def local_adapter(store: StoreRecords, policy: PolicyVersion, out_dir: str | Path) -> Path:
    """Return a folder holding ``policy``'s adapter with its recorded content hash (restoring it if need be).

    A policy recorded before adapters were hashed is returned where it was trained. Raises
    `ArtifactCorrupt` (one line, exit 2) when a folder or the stored copy holds other content.
    """
    if not policy.adapter:
        raise ValueError(f"policy {policy.version} has no adapter")
    if policy.adapter_sha256 is None:
        return Path(policy.adapter)
    here = (Path(out_dir).expanduser() / "adapters" / policy.version).resolve()
    with _restoring:
        for folder in dict.fromkeys([Path(policy.adapter), here]):
            if folder.exists():
                found = content_hash(folder)
                if found != policy.adapter_sha256:
                    raise _refuse_changed(folder, policy, found)
                return folder
        try:
            fetch_artifact(store, policy.adapter_sha256, here)
        except OSError:
            if not here.is_dir():  # another process restored it first: checked below like any copy
                raise
        found = content_hash(here)
        if found != policy.adapter_sha256:
            raise _refuse_changed(here, policy, found)
        return here
