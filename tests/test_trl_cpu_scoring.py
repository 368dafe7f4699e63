"""On the CPU, TRL's fused LM head scores only the labelled tokens (`score_labelled_tokens_only`): same results."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl", reason="needs the [train] extra")


def test_scoring_only_the_labelled_tokens_gives_the_same_log_probs_and_gradients(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import trl.trainer.utils as tu
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl.kernels.chunked_logprob import _use_triton as trls_own

    from swm.training.trl_update import score_labelled_tokens_only

    # TRL's own choice for the first run, whether or not a training earlier in this process patched it; put back after
    monkeypatch.setattr(tu, "_use_triton", trls_own)
    scored: list[int] = []  # how many positions each call projected onto the vocabulary
    real = tu._ChunkedLogProbFunction

    class Spy:
        @staticmethod
        def apply(hidden: Any, *args: Any) -> Any:
            scored.append(hidden.shape[0])
            return real.apply(hidden, *args)

    monkeypatch.setattr(tu, "_ChunkedLogProbFunction", Spy)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True))
    tu.add_fused_lm_head(model, outputs=("log_probs", "entropy", "mean_logits", "is_top1"))
    ids = torch.randint(0, 300, (2, 12))
    labels = ids.clone()
    labels[:, :8] = -100  # the prompt
    labels[1, 10:] = -100  # the second row's padding

    def run() -> tuple[Any, dict[str, Any]]:
        model.zero_grad()
        out = model(input_ids=ids, labels=labels, fused_lm_head=True)
        out.loss.backward()
        return out, {name: p.grad.clone() for name, p in model.named_parameters()}

    every, every_grads = run()
    score_labelled_tokens_only()
    score_labelled_tokens_only()  # once is enough: a second call wraps nothing again
    labelled, labelled_grads = run()
    assert scored == [2 * 11, 4 + 2], "first every shifted position, then only the labelled ones"
    for field in ("loss", "log_probs", "entropy", "mean_logits", "is_top1"):
        torch.testing.assert_close(getattr(labelled, field), getattr(every, field))
    assert labelled_grads.keys() == every_grads.keys()
    for name, grad in every_grads.items():
        torch.testing.assert_close(labelled_grads[name], grad, msg=name)
