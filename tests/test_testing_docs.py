"""docs/testing.md's example tests run as written, and the fake server runs as ``python -m swm.testing.server``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "testing.md"


def _examples() -> dict[str, Any]:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert blocks, "docs/testing.md has no Python example"
    namespace: dict[str, Any] = {"__name__": "docs_testing_example"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102 - the page's own example
    return {name: fn for name, fn in namespace.items() if name.startswith("test_") and callable(fn)}


EXAMPLES = _examples()


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_documented_example_passes(name: str) -> None:
    EXAMPLES[name]()


def test_the_example_fails_when_the_answer_is_wrong() -> None:
    from swm.schemas import ReasonedAnswer
    from swm.testing import ScriptedChatModel

    wrong = ScriptedChatModel(replies=[ReasonedAnswer(reasoning="x", answer="the box")])
    source = DOC.read_text()
    assert "ScriptedChatModel(replies=[ReasonedAnswer(" in source
    namespace: dict[str, Any] = {}
    exec(compile(re.findall(r"```python\n(.*?)```", source, re.S)[0], str(DOC), "exec"), namespace)  # noqa: S102
    namespace["ScriptedChatModel"] = lambda replies: wrong
    with pytest.raises(AssertionError):
        namespace["test_the_answer_comes_from_the_scripted_model"]()


def test_the_server_runs_as_a_module_with_faults() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "swm.testing.server", "--fault-rate", "1", "--fault-kinds", "500"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.startswith("READY http://127.0.0.1:"), line
        base = line.split()[1]
        with urllib.request.urlopen(f"{base}/models", timeout=10) as reply:
            assert json.loads(reply.read())["data"][0]["id"] == "fake"
        request = urllib.request.Request(f"{base}/chat/completions", method="POST",
                                         data=json.dumps({"model": "fake", "messages": []}).encode(),
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as failed:
            urllib.request.urlopen(request, timeout=10)
        assert failed.value.code == 500
        with urllib.request.urlopen(f"{base}/stats", timeout=10) as reply:
            assert json.loads(reply.read())["injected"] == {"500": 1}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert "RuntimeWarning" not in (proc.stderr.read() if proc.stderr else "")
