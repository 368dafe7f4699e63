"""PPO on a tiny random Llama: the direction of one step, the token masks, and divergence."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
from test_lifelong_train import tiny_llama  # noqa: E402

from swm.training.config import PolicyConfig, PPOConfig  # noqa: E402
from swm.training.policy import LoraValueModel, collate, gather, load_base, spread  # noqa: E402
from swm.training.ppo import Diverged, Sample, make_optimizer, micro_rows, ppo_loss, ppo_update  # noqa: E402

CONFIG = PolicyConfig(base="", lora_r=4, lora_alpha=8, max_new_tokens=6, autocast="off")  # float32: exact equalities


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    return tiny_llama(tmp_path_factory.mktemp("tiny") / "model")


def policy(base_dir: Path) -> LoraValueModel:
    torch.manual_seed(1)
    return LoraValueModel.create(CONFIG.model_copy(update={"base": str(base_dir)}))


def ids(p: LoraValueModel, text: str) -> list[int]:
    return [int(i) for i in p.tokenizer(text, add_special_tokens=False)["input_ids"]]


def logprobs_of(p: LoraValueModel, prompt: list[int], completions: list[list[int]]) -> list[float]:
    batch = collate([prompt] * len(completions), completions, p.tokenizer.pad_token_id)
    with torch.no_grad():
        lp, _ = p.score(batch)
    return [sum(row) for row in gather(lp, batch)]


def test_one_ppo_step_raises_positive_and_lowers_negative_tokens(base_dir: Path) -> None:
    p = policy(base_dir)
    prompt = p.prompt_ids("I can offer $ 500 for the bike")
    good, bad = ids(p, "I would offer 520 ."), ids(p, "no no whatever !")
    before = logprobs_of(p, prompt, [good, bad])
    samples = [Sample(role="buyer", prompt_ids=prompt, token_ids=t, old_logprobs=lp, advantages=[a] * len(t),
                      returns=[0.0] * len(t))
               for t, a in ((good, 1.0), (bad, -1.0))
               for lp in [logprobs_of_tokens(p, prompt, t)]]
    stats = ppo_update(p, make_optimizer(p, PPOConfig(lr=1e-2)), samples, PPOConfig(lr=1e-2, minibatch=2))
    after = logprobs_of(p, prompt, [good, bad])
    assert stats["steps"] == 1 and stats["clipped"] == 0.0  # the first ratio is exactly 1
    assert after[0] > before[0], "the positively advantaged reply became more likely"
    assert after[1] < before[1], "the negatively advantaged reply became less likely"


def logprobs_of_tokens(p: LoraValueModel, prompt: list[int], tokens: list[int]) -> list[float]:
    batch = collate([prompt], [tokens], p.tokenizer.pad_token_id)
    with torch.no_grad():
        lp, _ = p.score(batch)
    return gather(lp, batch)[0]


def test_a_seats_loss_covers_only_its_own_generated_tokens(base_dir: Path) -> None:
    p = policy(base_dir)
    # the seller's words are in the buyer's prompt: context, never a target
    seller_said = ids(p, "no whatever 520")
    prompt = p.prompt_ids("Ava at turn 0 : no whatever 520")
    mine = ids(p, "I can offer 500 .")
    batch = collate([prompt, seller_said], [mine, ids(p, "would work")], p.tokenizer.pad_token_id)
    assert [batch.targets[0, batch.mask[0].bool()].tolist(), batch.targets[1, batch.mask[1].bool()].tolist()] == [
        mine, ids(p, "would work")]
    assert batch.mask[0].sum() == len(mine)
    old = spread(logprobs_of_rows(p, batch), batch)
    with torch.no_grad():
        ref, _ = p.score(batch, reference=True)
    adv = spread([[1.0] * len(mine), [-1.0, 2.0]], batch)
    ret = torch.zeros_like(adv)
    loss, _ = ppo_loss(p, batch, old, ref, adv, ret, PPOConfig())
    # anything written outside the generated tokens (prompts, padding) does not change the loss
    noise = torch.randn_like(adv) * (1 - batch.mask) * 100
    loss_noisy, _ = ppo_loss(p, batch, old + noise, ref + noise, adv + noise, ret + noise, PPOConfig())
    assert float(loss.detach()) == pytest.approx(float(loss_noisy.detach()), rel=1e-6)


def logprobs_of_rows(p: LoraValueModel, batch: object) -> list[list[float]]:
    with torch.no_grad():
        lp, _ = p.score(batch)  # type: ignore[arg-type]
    return gather(lp, batch)  # type: ignore[arg-type]


def test_a_non_finite_loss_stops_before_any_step(base_dir: Path) -> None:
    p = policy(base_dir)
    prompt = p.prompt_ids("the bike")
    tokens = ids(p, "I can offer 500")
    before = [t.detach().clone() for t in p.parameters()]
    samples = [Sample(role="buyer", prompt_ids=prompt, token_ids=tokens, old_logprobs=[0.0] * len(tokens),
                      advantages=[float("nan")] * len(tokens), returns=[0.0] * len(tokens))]
    with pytest.raises(Diverged, match="loss is nan"):
        ppo_update(p, make_optimizer(p, PPOConfig()), samples, PPOConfig())
    assert all(torch.equal(a, b) for a, b in zip(before, p.parameters(), strict=True))


def test_generation_records_tokens_and_their_logprobs(base_dir: Path, tmp_path: Path) -> None:
    p = policy(base_dir)
    gen = p.generate("I can offer $ 500 for the bike", seed="r1")
    again = p.generate("I can offer $ 500 for the bike", seed="r1")
    assert gen == again, "a seeded sample is replayed exactly"
    assert len(gen.token_ids) == len(gen.logprobs) >= 1 and all(lp <= 0 for lp in gen.logprobs)
    p.save(tmp_path / "ckpt", meta={"iteration": 1})
    model, tok = load_base(str(base_dir))
    loaded = LoraValueModel.create(CONFIG, adapter=tmp_path / "ckpt", base=(model, tok))
    assert loaded.generate("I can offer $ 500 for the bike", seed="r1") == gen


def test_scoring_only_the_generated_positions_equals_the_full_projection(base_dir: Path) -> None:
    """Log-probs (and their gradients) from the generated positions alone equal those of the full logits."""
    p = policy(base_dir)
    for module in p.model.modules():  # a non-zero adapter, so the LoRA matrices have gradients
        if hasattr(module, "lora_B"):
            for weight in module.lora_B.values():
                torch.nn.init.normal_(weight.weight, std=0.1)
    prompts = [p.prompt_ids("a short prompt"), p.prompt_ids("a much longer prompt with many more words in it")]
    completions = [ids(p, "one two three four"), ids(p, "five")]
    batch = collate(prompts, completions, p.tokenizer.pad_token_id)

    def full() -> torch.Tensor:
        out = p.model(input_ids=batch.input_ids, attention_mask=batch.attention)
        logits = out.logits[:, :-1].float() / p.config.temperature  # the sampling distribution's log-probs
        lp = torch.log_softmax(logits, -1).gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1)
        return lp * batch.mask

    grads = []
    for scorer in (full, lambda: p.score(batch)[0]):
        p.model.zero_grad()
        lp = scorer()
        (lp * batch.mask).sum().backward()
        grads.append(torch.cat([w.grad.flatten() for n, w in p.model.named_parameters() if w.grad is not None]))
        if scorer is full:
            expected = lp.detach()
        else:
            assert torch.allclose(lp.detach(), expected, atol=1e-5)
            assert float(lp.detach()[batch.mask == 0].abs().sum()) == 0.0
    assert torch.allclose(grads[0], grads[1], atol=1e-5) and float(grads[0].abs().sum()) > 0


def test_scoring_works_where_transformers_takes_only_an_int_logits_to_keep(base_dir: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Scoring runs on a transformers that mis-reads a 2-D ``logits_to_keep`` (5.17 did; the range admits 4.56)."""
    p = policy(base_dir)
    prompts = [p.prompt_ids("a short prompt"), p.prompt_ids("a longer prompt with more words")]
    batch = collate(prompts, [ids(p, "one two"), ids(p, "three")], p.tokenizer.pad_token_id)
    with torch.no_grad():
        expected, _ = p.score(batch)
    forward = p.model.forward

    def older_transformers(*args: object, logits_to_keep: object = 0, **kwargs: object) -> object:
        if torch.is_tensor(logits_to_keep) and logits_to_keep.dim() > 1:
            raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
        return forward(*args, logits_to_keep=logits_to_keep, **kwargs)

    monkeypatch.setattr(p.model, "forward", older_transformers)
    with torch.no_grad():
        assert torch.equal(p.score(batch)[0], expected)


def test_micro_batches_accumulate_to_the_same_update(base_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A minibatch run as micro-batches of one row (gradients accumulated) makes the update of the whole, whether
    the rows are set (``micro_batch``) or follow from the token budget (``micro_tokens``, the default's rule)."""
    passes: list[int] = []
    loss_of = ppo_loss

    def counted(policy: object, batch: object, *args: object) -> object:
        passes[-1] += 1
        return loss_of(policy, batch, *args)  # type: ignore[arg-type]

    monkeypatch.setattr("swm.training.ppo.ppo_loss", counted)
    after = []
    for micro, budget in ((None, 10_000), (1, 10_000), (None, 1)):
        passes.append(0)
        p = policy(base_dir)
        prompt = p.prompt_ids("I can offer $ 500 for the bike")
        replies = [ids(p, "I would offer 520 ."), ids(p, "no"), ids(p, "deal at five hundred then")]
        samples = [Sample(role="buyer", prompt_ids=prompt, token_ids=t, old_logprobs=logprobs_of_tokens(p, prompt, t),
                          advantages=[a] * len(t), returns=[0.5] * len(t))
                   for t, a in zip(replies, (1.0, -1.0, 0.5), strict=True)]
        config = PPOConfig(lr=1e-2, minibatch=3, micro_batch=micro, micro_tokens=budget)
        stats = ppo_update(p, make_optimizer(p, config), samples, config)
        after.append((torch.cat([w.detach().flatten() for w in p.parameters()]), stats))
    assert passes == [1, 3, 3]  # all three rows at once within a large budget; one at a time under a tiny one
    for other in after[1:]:
        assert torch.allclose(after[0][0], other[0], atol=1e-6)
        assert after[0][1] == pytest.approx(other[1], abs=1e-6)


def test_the_token_budget_sets_the_rows_a_pass() -> None:
    """Rows x the longest row within the budget, at least one row, at most the chunk: a multi-turn seat's
    ~2,000-token transcript goes one row at a time under the default 2,048, a two-seat reply's few hundred several."""
    def rows(*lengths: int) -> list[Sample]:
        return [Sample(role="a", prompt_ids=[1] * (n - 1), token_ids=[2], old_logprobs=[0.0], advantages=[0.0],
                       returns=[0.0]) for n in lengths]

    default = PPOConfig().micro_tokens
    assert default == 2048
    assert micro_rows(rows(*[1900] * 8), default) == 1
    assert micro_rows(rows(*[300] * 8), default) == 6
    assert micro_rows(rows(300, 1000, 300), default) == 2  # the longest row sets it
    assert micro_rows(rows(*[100] * 4), default) == 4  # never more than the chunk
    assert micro_rows(rows(5000), default) == 1  # a row longer than the budget still trains
