"""The decision player's cached tokenizers are freed at exit, not by the garbage collector at shutdown."""

from __future__ import annotations

import pytest

from swm.lifelong import decision_play

pytest.importorskip("llama_cpp")


def test_cached_tokenizers_are_freed_by_the_exit_hook() -> None:
    from swm.serving.embedded import gguf_path  # noqa: PLC0415

    vocab = decision_play._vocab(gguf_path())
    assert vocab._model.model is not None
    decision_play._chat_formatter(gguf_path())
    decision_play.close_vocabs()
    assert vocab._model.model is None  # freed now, while llama-cpp-python is loaded
    assert not decision_play._vocabs and not decision_play._formatters
    assert decision_play._vocab(gguf_path()) is not vocab  # a later use loads it again
