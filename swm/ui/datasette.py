"""datasette metadata for a store: ``python -m swm.ui.datasette swm.db > metadata.json``.

datasette keys a database's table descriptions and canned queries by its name, the file's stem, so
the shipped template (``datasette.yml``, written for any name as ``"*"``) is filled in for the file
given. Then ``datasette swm.db --metadata metadata.json`` (docs/ui.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

TEMPLATE = Path(__file__).with_name("datasette.yml")


def metadata_for(db: str | Path) -> dict[str, Any]:
    """Return datasette's metadata for the SQLite file ``db``: the template keyed by the file's stem."""
    data = yaml.safe_load(TEMPLATE.read_text(encoding="utf-8"))
    data["databases"] = {Path(db).stem: data["databases"]["*"]}
    return dict(data)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m swm.ui.datasette STORE.db > metadata.json", file=sys.stderr)
        return 2
    print(json.dumps(metadata_for(args[0]), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
