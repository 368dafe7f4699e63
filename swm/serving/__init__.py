"""Serving models: the embedded llama.cpp server, trained adapters on it or on a runtime-LoRA server.

`embedded` runs llama.cpp's OpenAI-compatible server (the default model, and a base GGUF with
GGUF LoRAs): llama.cpp's C++ ``llama-server`` (`llama_server`, built by `engine`) when it is
built, else llama-cpp-python's; `gguf_lora` writes the GGUF files it loads; `runtime_lora` loads
PEFT adapters on a vLLM-style server at run time; `adapters` holds `serve_adapter` (paths in, a
model spec out), the one rule for finding the base GGUF, and one adapter per run at a time.
"""

from swm.serving.adapters import ServerSlots, adapter_gguf, find_base_gguf, require_base_gguf, serve_adapter

__all__ = ["ServerSlots", "adapter_gguf", "find_base_gguf", "require_base_gguf", "serve_adapter"]
