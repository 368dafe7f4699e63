"""The fake vLLM of `swm.testing.vllm`, under the name the tests import it by."""

from swm.testing.vllm import CHAT, WORDS, FakeVllm, TorchLora, wide_tiny_llama

__all__ = ["CHAT", "WORDS", "FakeVllm", "TorchLora", "wide_tiny_llama"]
