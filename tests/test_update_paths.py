"""The update's fast paths give the update of the plain path: rows without signal skipped, a shared prefix
forwarded once, π_old scored at the update, bfloat16 autocast on the CPU (within its stated tolerance)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
from test_lifelong_train import tiny_llama  # noqa: E402

from swm.training import advantages as adv  # noqa: E402
from swm.training.config import PolicyConfig, PPOConfig  # noqa: E402
from swm.training.device import cpu_bf16, use_autocast  # noqa: E402
from swm.training.policy import LoraValueModel, collate_spans, gather  # noqa: E402
from swm.training.ppo import Sample, fill_old_logprobs, make_optimizer, ppo_update, skips_zero_rows  # noqa: E402
from swm.training.prefix import MIN_SHARED, Prefix, forwarded_tokens, prefix_groups  # noqa: E402
from swm.training.trajectory import Rollout, SeatTrajectory, SeatTurn  # noqa: E402

CONFIG = PolicyConfig(base="", lora_r=4, lora_alpha=8, max_new_tokens=6, autocast="off")


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    return tiny_llama(tmp_path_factory.mktemp("tiny") / "model")


def policy(base_dir: Path, **changes: object) -> LoraValueModel:
    torch.manual_seed(1)
    p = LoraValueModel.create(CONFIG.model_copy(update={"base": str(base_dir), **changes}))
    for module in p.model.modules():  # a non-zero adapter, so the prefix's keys and values depend on it
        if hasattr(module, "lora_B"):
            for weight in module.lora_B.values():
                torch.nn.init.normal_(weight.weight, std=0.2)
    return p


def ids(p: LoraValueModel, text: str) -> list[int]:
    return [int(i) for i in p.tokenizer(text, add_special_tokens=False)["input_ids"]]


def seat_rows(p: LoraValueModel, advantages: list[float]) -> list[Sample]:
    """A group's seat rows: one first prompt, then each rollout's own replies and messages (two spans a row)."""
    prompt = p.prompt_ids("You are Ava. Your friends: Ivan Khan, Milo Evans, Nia Lopez. Find the friend you share.")
    assert len(prompt) > MIN_SHARED
    replies = ["My friends: 1. Ivan Khan", "1. Nia Lopez 2. Milo", "no idea", "Milo Evans?"]
    heard = ["Tara said: Omar Reyes", "Tara said: Nia Lopez", "nothing", "Tara: Milo Evans"]
    rows = []
    for k, a in enumerate(advantages):
        first, news, second = ids(p, replies[k % 4]), ids(p, heard[k % 4]), ids(p, replies[(k + 1) % 4])
        sequence = [*prompt, *first, *news, *second]
        spans = [(len(prompt), len(prompt) + len(first)), (len(sequence) - len(second), len(sequence))]
        n = len(first) + len(second)
        rows.append(Sample(role="finder", prompt_ids=prompt, token_ids=sequence[len(prompt):], old_logprobs=[],
                           advantages=[a] * n, returns=[0.0] * n, spans=spans))
    return rows


def weights(p: LoraValueModel) -> torch.Tensor:
    return torch.cat([w.detach().flatten() for w in p.parameters()])


def whole_logprobs(p: LoraValueModel, rows: list[Sample]) -> list[list[float]]:
    batch = collate_spans([s.sequence for s in rows], [s.targets for s in rows], p.tokenizer.pad_token_id)
    with torch.no_grad():
        lp, _ = p.score(batch)
    return gather(lp, batch)


def test_a_shared_prefix_scores_as_each_row_whole(base_dir: Path) -> None:
    p = policy(base_dir)
    rows = seat_rows(p, [1.0, -1.0, 0.5])
    groups = prefix_groups(rows)
    assert len(groups) == 1 and groups[0].length >= len(rows[0].prompt_ids) - 1
    assert forwarded_tokens(rows) == sum(len(s.sequence) for s in rows) - 2 * groups[0].length
    assert forwarded_tokens(rows, share=False) == sum(len(s.sequence) for s in rows)
    cut = groups[0].length
    prefix = Prefix.forward(p, rows[0].sequence[:cut])
    batch = collate_spans([s.sequence[cut:] for s in rows], [[(a - cut, b - cut) for a, b in s.targets] for s in rows],
                          p.tokenizer.pad_token_id)
    with torch.no_grad():
        lp, _ = p.score(batch, prefix=prefix)
    for shared, whole in zip(gather(lp, batch), whole_logprobs(p, rows), strict=True):
        assert shared == pytest.approx(whole, abs=1e-5)


@pytest.mark.parametrize("kl_coef", [0.0, 0.1])
def test_the_update_through_a_shared_prefix_is_the_whole_rows_update(base_dir: Path, kl_coef: float) -> None:
    """The gradient reaches the adapter through the prefix's keys and values, once for every row of the group."""
    after = []
    for share in (False, True):
        p = policy(base_dir)
        rows = seat_rows(p, [1.0, -1.0, 0.5, 2.0])
        for s, lp in zip(rows, whole_logprobs(p, rows), strict=True):
            s.old_logprobs = lp
        config = PPOConfig(lr=1e-2, minibatch=4, micro_tokens=60, shared_prefix=share, kl_coef=kl_coef,
                           value_coef=0.0)
        stats = ppo_update(p, sgd(p), rows, config)
        after.append((weights(p), stats))
    moved = after[0][0] - weights(policy(base_dir))
    assert moved.abs().max() > 1e-3, "the update moved the adapter"
    assert torch.allclose(after[0][0], after[1][0], atol=1e-6)
    assert after[1][1]["forwarded_tokens"] < after[0][1]["forwarded_tokens"]
    assert after[0][1]["loss"] == pytest.approx(after[1][1]["loss"], abs=1e-5)


def sgd(p: LoraValueModel) -> torch.optim.Optimizer:
    """Plain SGD: its step is the gradient's, where Adam's first step is about lr x sign(g) and so turns a 1e-9
    rounding difference of a near-zero gradient into a step of lr."""
    return torch.optim.SGD(p.parameters(), lr=1.0)


def test_rows_without_signal_are_skipped_and_the_update_is_the_same(base_dir: Path) -> None:
    after = []
    for skip, optimizer in (("off", sgd), ("auto", sgd), ("off", make_optimizer), ("auto", make_optimizer)):
        p = policy(base_dir)
        # minibatch 1: a row with signal and two without; minibatch 2: only rows without
        rows = seat_rows(p, [0.0, 1.5, 0.0, 0.0, 0.0])
        for s, lp in zip(rows, whole_logprobs(p, rows), strict=True):
            s.old_logprobs = lp
        config = PPOConfig(lr=1e-2, minibatch=3, kl_coef=0.0, value_coef=0.0, skip_zero=skip)
        stats = ppo_update(p, optimizer(p, config) if optimizer is make_optimizer else optimizer(p), rows, config)
        after.append((weights(p), stats))
    (plain, plain_stats), (skipped, stats), (adam_plain, _), (adam_skipped, _) = after
    assert (plain_stats["steps"], plain_stats["skipped_rows"]) == (2.0, 0.0)
    assert (stats["steps"], stats["skipped_rows"], stats["skipped_steps"]) == (1.0, 4.0, 1.0)
    assert stats["forwarded_tokens"] < plain_stats["forwarded_tokens"] / 2
    assert (plain - weights(policy(base_dir))).abs().max() > 1e-3, "the row with signal moved the adapter"
    assert torch.allclose(plain, skipped, atol=1e-6), "a zero-advantage row's gradient is zero: skipping it is exact"
    assert not torch.allclose(adam_plain, adam_skipped, atol=1e-6), \
        "AdamW moves on a zero gradient (its momentum): the skipped step is the one difference"


def test_skipping_is_exact_only_without_kl_and_value() -> None:
    assert skips_zero_rows(PPOConfig(kl_coef=0.0, value_coef=0.0))
    assert not skips_zero_rows(PPOConfig(kl_coef=0.05, value_coef=0.0))
    assert not skips_zero_rows(PPOConfig(kl_coef=0.0, value_coef=0.5))
    assert skips_zero_rows(PPOConfig(kl_coef=0.05, skip_zero="on"))
    assert not skips_zero_rows(PPOConfig(kl_coef=0.0, value_coef=0.0, skip_zero="off"))


def test_old_logprobs_at_the_update_equal_the_whole_rows_and_skip_rows_without_signal(base_dir: Path) -> None:
    p = policy(base_dir)
    rows = seat_rows(p, [1.0, 0.0, -1.0])
    config = PPOConfig(kl_coef=0.0, value_coef=0.0)
    assert fill_old_logprobs(p, rows, config) == 2
    assert rows[1].old_logprobs == []
    expected = whole_logprobs(p, rows)
    for i in (0, 2):
        assert rows[i].old_logprobs == pytest.approx(expected[i], abs=1e-5)
    assert fill_old_logprobs(p, rows, config) == 0, "rows scored already are not scored again"
    stats = ppo_update(p, make_optimizer(p, config), rows, config)
    assert stats["clipped"] == 0.0 and stats["skipped_rows"] == 1.0


def test_bfloat16_autocast_stays_near_float32(base_dir: Path) -> None:
    rows = seat_rows(policy(base_dir), [1.0, 1.0])
    exact = whole_logprobs(policy(base_dir), rows)
    fast = whole_logprobs(policy(base_dir, autocast="bfloat16"), rows)
    worst = max(abs(a - b) for x, y in zip(exact, fast, strict=True) for a, b in zip(x, y, strict=True))
    assert 0 < worst < 0.05, f"bfloat16 log-probs {worst:.4f} nats from float32"


def test_autocast_follows_the_cpus_flags(tmp_path: Path) -> None:
    with_bf16, without = tmp_path / "bf16", tmp_path / "avx2"
    with_bf16.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_tile\n")
    without.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 fma\n")
    assert cpu_bf16(str(with_bf16)) and not cpu_bf16(str(without)) and not cpu_bf16(str(tmp_path / "none"))
    assert not use_autocast("off", torch.device("cpu"), torch.float32)
    assert use_autocast("bfloat16", torch.device("cpu"), torch.float32)
    assert not use_autocast("bfloat16", torch.device("cpu"), torch.bfloat16), "weights already low: no autocast"
    assert use_autocast("auto", torch.device("cpu"), torch.float32) == cpu_bf16()


def rollout(task: str, rewards: list[float]) -> Rollout:
    turn = SeatTurn(turn=0, prompt="", text="x", prompt_ids=[1], token_ids=[2, 3], logprobs=[0.0, 0.0])
    seats = [SeatTrajectory(seat="A", role="finder", turns=[turn.model_copy(update={"reward": r})]) for r in rewards]
    return Rollout(rollout_id=f"{task}/{len(rewards)}", task_id=task, iteration=0, sample=0, seats=seats)


def test_a_group_with_equal_returns_has_exactly_zero_advantage() -> None:
    """0.1 + 0.1 + 0.1 is not 0.3: the centred return of equal returns was rounding over ε, not 0."""
    flat, varied = [rollout("t1", [0.1]) for _ in range(3)], [rollout("t2", [r]) for r in (0.0, 1.0, 0.1)]
    adv.assign_advantages([*flat, *varied], adv.AdvantageConfig(estimator="group"))
    assert all(a == 0.0 for r in flat for s in r.seats for t in s.turns for a in t.advantages)
    assert any(a != 0.0 for r in varied for s in r.seats for t in s.turns for a in t.advantages)
    centred = [rollout("t1", [0.1]) for _ in range(3)] + [rollout("t2", [r]) for r in (0.0, 1.0, 0.1)]
    adv.assign_advantages(centred, adv.AdvantageConfig(estimator="group", whiten="centre"))  # as before
    assert any(a != 0.0 for r in centred[:3] for s in r.seats for t in s.turns for a in t.advantages)


def test_token_values_of_a_seat_row_are_each_turns_own(base_dir: Path) -> None:
    """The critic's pass scores a seat's appended turns as one row (and fills π_old the sampler left out): the
    values and log-probs equal those of each turn on its own prompt."""
    from swm.training.ppo import score_turns, token_values

    p = policy(base_dir)
    rollouts = []
    for g in range(3):  # a group: the same first prompt, other replies
        first = p.prompt_ids("You are Ava. Your friends: Ivan Khan, Milo Evans. Find the friend you share.")
        reply = ids(p, ["My friends: Ivan", "Milo Evans", "no"][g])
        second = [*first, *reply, *ids(p, " Tara said: Omar Reyes. Your turn.")]
        turns = [SeatTurn(turn=0, prompt="", text="", prompt_ids=first, token_ids=reply, logprobs=[]),
                 SeatTurn(turn=2, prompt="", text="", prompt_ids=second, token_ids=ids(p, "Ivan Khan"), logprobs=[])]
        rollouts.append(Rollout(rollout_id=f"r{g}", task_id="t", iteration=0, sample=g,
                                seats=[SeatTrajectory(seat="A", role="finder", turns=turns)]))
    token_values(p, rollouts)
    turns = [t for r in rollouts for t in r.seats[0].turns]
    expected = score_turns(p, turns)
    for turn, (logprobs, values) in zip(turns, expected, strict=True):
        assert turn.logprobs == pytest.approx(logprobs, abs=1e-5)
        assert turn.values == pytest.approx(values, abs=1e-5)
        assert turn.advantages == []


def test_groups_follow_each_tasks_first_prompt() -> None:
    """A batch of tasks shares only the chat template's head; each task's G rows share their whole first prompt:
    the groups are the tasks', not one group of everything at the short common head."""
    head = list(range(1, 31))
    rows = []
    for task in (list(range(40, 70)), list(range(70, 100))):
        for reply in ([5, 6, 7], [8, 9], [10, 11, 12, 13]):
            rows.append(Sample(role="finder", prompt_ids=head + task, token_ids=reply, old_logprobs=[],
                               advantages=[1.0] * len(reply), returns=[0.0] * len(reply)))
    rows.append(Sample(role="finder", prompt_ids=list(range(200, 260)), token_ids=[5], old_logprobs=[],
                       advantages=[1.0], returns=[0.0]))  # a row that shares nothing
    groups = prefix_groups(rows)
    assert [(sorted(g.rows), g.length) for g in groups] == [([0, 1, 2], 59), ([3, 4, 5], 59), ([6], 0)]
    assert forwarded_tokens(rows) == sum(len(s.sequence) for s in rows) - 2 * 2 * 59
    # only the head in common: one group at the head beats each row whole
    heads = [Sample(role="a", prompt_ids=head + [100 + k], token_ids=[5], old_logprobs=[], advantages=[1.0],
                    returns=[0.0]) for k in range(3)]
    assert [(g.rows, g.length) for g in prefix_groups(heads)] == [([0, 1, 2], 30)]


def test_the_iteration_line_counts_the_rows_skipped() -> None:
    from swm.commands.progress import iteration_line

    line = iteration_line(3, {"estimator": "group", "rows": 64.0, "skipped_rows": 40.0, "kl": None, "loss": -0.0123})
    assert "rows 24 trained, 40 without signal skipped" in line and "KL —" in line and "loss -0.0123" in line
    assert "skipped" not in iteration_line(3, {"estimator": "group"}), "an update that did not run counts nothing"
