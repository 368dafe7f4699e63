"""Self-play sanity: one tiny model plays both seats of a two-seat task, and each estimator raises the joint reward.

The task and the model are `toy_two_seat`'s: seat A is told a colour and says one word, seat B
hears only that word and must name the colour; the joint reward (1 when B names it) goes to both
seats. It is measured exactly (`toy_two_seat.joint_reward`), before and after a bounded number of
self-play iterations, each with fresh rollouts from the current policy (a fresh π_old), G
rollouts per colour, and the loop's own advantage code (`swm.training.advantages.assign_advantages`)
with the estimator under test:

* hierarchical — value head, turn- then token-level GAE per seat (OMAR);
* group — critic-free, returns normalised within (task, role) (GRPO-style);
* role — SPIRAL's role-conditioned running baseline per (family, role), kept across iterations.

Each must raise the joint reward by its margin (`MARGINS`); the control shuffles the joint rewards
among the iteration's rollouts (same budget, same estimator) and must stay under `CONTROL_CEILING`.
Measured (10 iterations, G = 16 a colour), over the step sizes 3e-2, 3e-2 × (1 + 1e-5) and 2.9e-2
and MKL's AVX2 kernels, so that no margin rests on float rounding: group +0.21 to +0.31, role +0.10
to +0.13, hierarchical +0.09 to +0.17; shuffled −0.03 to +0.02. Group learns fastest here because its
baseline is per colour (task); the role baseline pools the colours of a role by design (SPIRAL's),
and the value head has to learn them. torch runs on one thread (see test_learning_sanity).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
import toy_two_seat as toy  # noqa: E402

from swm.training.advantages import AdvantageConfig, assign_advantages  # noqa: E402
from swm.training.config import PolicyConfig, PPOConfig  # noqa: E402
from swm.training.policy import LoraValueModel  # noqa: E402
from swm.training.ppo import make_optimizer, ppo_update, token_values, training_samples  # noqa: E402
from swm.training.trajectory import Rollout, SeatTrajectory, SeatTurn  # noqa: E402

ITERATIONS = 10  # fresh rollouts → advantages → PPO update
GROUP = 16  # rollouts per colour (task) per iteration
LR = 3e-2
EPOCHS = 2
# per estimator: group normalises within a colour (task), so its baseline knows which colour is hard; the
# hierarchical value head must learn that, and the role baseline pools every colour of a role by design
MARGINS = {"group": 0.15, "hierarchical": 0.04, "role": 0.06}
CONTROL_CEILING = 0.03
ESTIMATORS = ("hierarchical", "group", "role")


@pytest.fixture(scope="module", autouse=True)
def one_thread(one_torch_thread: None) -> None:
    """torch on one thread for the whole module (conftest.one_torch_thread)."""


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return toy.make_model(tmp_path_factory.mktemp("two_seat") / "base")


def rollouts_of(policy: LoraValueModel, iteration: int, generator: torch.Generator) -> list[Rollout]:
    """One iteration's rollouts: the same policy speaks as A, then listens as B, G times a colour.

    Each distinct prompt's next-word distribution is computed once (sampling), and every turn's
    log-probability is then recomputed in batches by the loop's own scorer (`score_turns`), as the
    loop does. The joint reward is left at 0 (scored later).
    """
    from swm.training.ppo import score_turns

    probs: dict[str, torch.Tensor] = {}

    def draw(prompt: str) -> str:
        if prompt not in probs:
            probs[prompt] = toy.next_word_probs(policy.model, policy.tokenizer, prompt)
        pick = torch.multinomial(probs[prompt], 1, generator=generator)
        return str(policy.tokenizer.convert_ids_to_tokens(int(pick)))

    def turn(k: int, prompt: str, word: str) -> SeatTurn:
        return SeatTurn(turn=k, prompt=prompt, text=word, prompt_ids=policy.prompt_ids(prompt),
                        token_ids=[int(policy.tokenizer.convert_tokens_to_ids(word))], logprobs=[])

    out = []
    for colour in toy.COLOURS:
        for g in range(GROUP):
            said = draw(toy.speaker_prompt(colour))
            named = draw(toy.listener_prompt(said))
            seats = [SeatTrajectory(seat="A", role=toy.SPEAKER, turns=[turn(0, toy.speaker_prompt(colour), said)]),
                     SeatTrajectory(seat="B", role=toy.LISTENER, turns=[turn(1, toy.listener_prompt(said), named)])]
            out.append(Rollout(rollout_id=f"{iteration}/{colour}/{g}", task_id=colour, family="toy",
                               iteration=iteration, sample=g, seats=seats, order=["A", "B"]))
    turns = [t for r in out for s in r.seats for t in s.turns]
    for t, (logprobs, _) in zip(turns, score_turns(policy, turns), strict=True):
        t.logprobs = logprobs
    return out


def selfplay_gain(base: Path, estimator: str, shuffled: bool = False) -> float:
    """Run self-play iterations on the toy task; return the rise of the exact joint reward."""
    torch.manual_seed(0)
    policy = LoraValueModel.create(PolicyConfig(base=str(base), max_new_tokens=1, temperature=1.0))
    cfg = AdvantageConfig(estimator=estimator)  # type: ignore[arg-type]
    ppo = PPOConfig(lr=LR, epochs=EPOCHS, minibatch=8, kl_coef=0.0,
                    value_coef=0.5 if estimator == "hierarchical" else 0.0)
    optimizer = make_optimizer(policy, ppo)
    rng = random.Random(0)
    generator = torch.Generator().manual_seed(0)
    baselines: dict[str, float] = {}
    start = toy.joint_reward(policy.model, policy.tokenizer)
    for iteration in range(ITERATIONS):
        rollouts = rollouts_of(policy, iteration, generator)
        joint = [float(r.seats[1].turns[0].text == r.task_id) for r in rollouts]
        if shuffled:
            rng.shuffle(joint)
        for r, reward in zip(rollouts, joint, strict=True):
            for seat in r.seats:  # one joint reward, each seat credited at its own turn
                seat.turns[-1].reward = reward
                seat.outcome = reward
        if estimator == "hierarchical":
            token_values(policy, rollouts)
        assign_advantages(rollouts, cfg, baselines)
        ppo_update(policy, optimizer, training_samples(rollouts), ppo)
    return toy.joint_reward(policy.model, policy.tokenizer) - start


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_selfplay_raises_the_joint_reward(base: Path, estimator: str) -> None:
    gain = selfplay_gain(base, estimator)
    assert gain >= MARGINS[estimator], f"self-play ({estimator}) raised the joint reward by only {gain:.3f}"


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_selfplay_on_a_shuffled_reward_does_not(base: Path, estimator: str) -> None:
    """The control: the joint rewards shuffled among the iteration's rollouts teach nothing about the task."""
    gain = selfplay_gain(base, estimator, shuffled=True)
    assert gain < CONTROL_CEILING, f"self-play ({estimator}) on a shuffled reward raised it by {gain:.3f}"


def test_role_baselines_persist_and_move_slowly() -> None:
    """The role-conditioned baseline is per (family, role), starts at the first batch's mean, then moves by 1 − αⁿ."""
    from swm.training.advantages import role_conditioned

    cfg = AdvantageConfig(estimator="role", baseline_decay=0.9)
    baselines: dict[str, float] = {}
    keys = [("toy", "speaker"), ("toy", "speaker"), ("toy", "listener"), ("other", "speaker")]
    first = role_conditioned([1.0, 0.0, 1.0, 0.0], keys, baselines, cfg)
    assert baselines == {"toy/speaker": 0.5, "toy/listener": 1.0, "other/speaker": 0.0}
    assert first == [0.5, -0.5, 0.0, 0.0]
    second = role_conditioned([1.0, 1.0, 0.0, 1.0], keys, baselines, cfg)
    assert baselines["toy/speaker"] == pytest.approx(0.81 * 0.5 + 0.19)
    assert baselines["toy/listener"] == pytest.approx(0.9)
    assert second == pytest.approx([0.405, 0.405, -0.9, 0.9])
