"""Belief gain: what it pays for (disclosure of one's own list), and what it cannot be earned by."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from swm.selfplay.belief import belief_prompts, disclosed, listed, shuffled
from swm.selfplay.rewards import RewardConfig, score
from swm.tasks.multi_turn import multi_turn_task
from swm.training.trajectory import Rollout, SeatTrajectory, SeatTurn

TASK = multi_turn_task("mutual_friend", 1)  # A: Pia Okafor, B: Vic Diaz; the friend: Nia Brook; cap 3
A, B = TASK.truth["seats"]
MINE, THEIRS = TASK.truth["lists"]


def test_the_task_is_the_one_these_cases_name() -> None:
    assert TASK.truth["friend"] == "Nia Brook" and TASK.truth["cap"] == 3
    assert {"Cara Ford", "Nia Brook", "Fay Quist"} <= set(MINE) and "Milo Evans" in THEIRS


@pytest.mark.parametrize(("text", "expected"), [
    ("My friends:\n1. Fay Quist\n2. Nia Brook", ["Fay Quist", "Nia Brook"]),  # in the list's order
    ("Nia-Brook, Nia Brook and N i a Brook", ["Nia Brook"]),  # however spelled, once
    ("My friends:\n1. Milo Evans\n2. Zoe Moreau", []),  # the partner's own names echoed back: not A's to disclose
    ("My friends:\n1. Eli Moreado", []),  # a name on neither list
    ("Cara Ford, Fay Quist, Nia Brook, Quinn Evans", None),  # four people: the cap is broken
    ("Cara-Ford, Fay_Quist, Nia Brook, Quinn2Evans", None),  # spelled apart, still four
    ("ANSWER: Nia Brook", None),  # an answer is not a message of the conversation
    ("The answer is Nia Brook, say ANSWER: Nia Brook", None),
])
def test_what_a_message_discloses(text: str, expected: list[str] | None) -> None:
    assert disclosed(TASK, A, text) == expected


def test_a_message_that_discloses_no_one_new_leaves_the_partners_prompt_as_it_was() -> None:
    said = [(A, "My friends:\n1. Cara Ford\n2. Nia Brook"),  # 0: a disclosure
            (B, "My friends:\n1. Milo Evans"),
            (A, "My friends:\n1. Milo Evans\n2. Zoe Moreau"),  # 2: B's own names echoed
            (B, "My friends:\n1. Hana Lopez"),
            (A, "Cara Ford, Fay Quist, Nia Brook, Quinn Evans"),  # 4: the cap broken
            (B, "ANSWER: Nia Brook"),
            (A, "Nia Brook! Nia Brook! The shared one is Nia-Brook."),  # 6: said again, however loudly
            (A, "My friends:\n1. Omar Chen")]  # 7: someone new
    prompts = {(turn, who): text for turn, who, text in belief_prompts(TASK, said)}
    assert (4, B) not in prompts and (5, A) not in prompts, "no state follows a cap break or an answer"
    assert prompts[(2, B)] == prompts[(0, B)] and prompts[(6, B)] == prompts[(2, B)]
    assert prompts[(0, B)] != prompts[(None, B)] and prompts[(7, B)] != prompts[(6, B)]
    heard = prompts[(7, B)].split(f"{A} says:", 1)[1]
    assert heard.strip().startswith(listed(["Cara Ford", "Nia Brook", "Omar Chen"]))
    assert "Zoe" not in heard and "Milo" not in heard and "Quinn" not in heard


@pytest.fixture(scope="module")
def tiny_policy(tiny_gguf_llama: Path) -> Any:
    torch = pytest.importorskip("torch")
    from swm.training.config import PolicyConfig
    from swm.training.policy import LoraValueModel

    torch.manual_seed(0)
    return LoraValueModel.create(PolicyConfig(base=str(tiny_gguf_llama), lora_r=4, lora_alpha=8, autocast="off"))


def test_gains_are_the_partners_log_prob_of_the_friend_after_minus_before(tiny_policy: Any) -> None:
    import torch

    from swm.selfplay.belief import belief_gains
    from swm.tasks.multi_turn import ANSWER_PREFILL, _finder

    said = [(A, "My friends:\n1. Cara Ford\n2. Nia Brook"), (B, "My friends:\n1. Milo Evans"),
            (A, "My friends:\n1. Milo Evans\n2. Zoe Moreau"), (B, "Cara Ford, Fay Quist, Nia Brook, Quinn Evans"),
            (A, "ANSWER: Nia Brook"), (B, "ANSWER: Nia Brook")]
    gains = belief_gains(tiny_policy, TASK, said)
    assert sorted(gains) == list(range(len(said)))
    assert gains[2] == gains[3] == gains[4] == gains[5] == 0.0, "echo, a broken cap and answers earn exactly 0"

    def belief(listener: str, speaker_said: list[tuple[str, str]]) -> float:
        tok = tiny_policy.tokenizer
        prompt = [*tiny_policy.prompt_ids(_finder(TASK, listener, speaker_said)[1]),
                  *tok(ANSWER_PREFILL, add_special_tokens=False)["input_ids"]]
        friend = tok(" Nia Brook", add_special_tokens=False)["input_ids"]
        ids = torch.tensor([[*prompt, *friend]])
        with torch.no_grad():
            logits = tiny_policy.model(input_ids=ids).logits[0].float() / tiny_policy.config.temperature
        logp = torch.log_softmax(logits, dim=-1)
        return float(sum(logp[len(prompt) - 1 + k, t] for k, t in enumerate(friend)))

    expected_a = belief(B, [(A, listed(["Cara Ford", "Nia Brook"]))]) - belief(B, [])
    expected_b = belief(A, [(B, listed(["Milo Evans"]))]) - belief(A, [])
    assert gains[0] == pytest.approx(expected_a, abs=1e-4) and gains[0] != 0.0
    assert gains[1] == pytest.approx(expected_b, abs=1e-4)


def test_an_iterations_gains_score_each_distinct_state_once_and_equal_each_rollouts_own(
        tiny_policy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A group's rollouts share their opening states (and here a first list): `gains_of` forwards each distinct
    (friend, prompt) once, batched, and gives every transcript the gains it gets alone."""
    import swm.training.ppo as ppo
    from swm.selfplay.belief import belief_gains, gains_of

    group = [[(A, "My friends:\n1. Cara Ford\n2. Nia Brook"), (B, "My friends:\n1. Milo Evans")],
             [(A, "My friends:\n1. Cara Ford\n2. Nia Brook"), (B, "ANSWER: Nia Brook")],
             [(A, "My friends:\n1. Fay Quist"), (B, "My friends:\n1. Milo Evans"), (A, "ANSWER: Nia Brook")]]
    alone = [belief_gains(tiny_policy, TASK, said) for said in group]
    scored: list[int] = []
    real = ppo.score_rows
    monkeypatch.setattr(ppo, "score_rows", lambda policy, rows, config=None: scored.append(len(rows)) or real(
        policy, rows, config))
    together = gains_of(tiny_policy, [(str(i), TASK, said) for i, said in enumerate(group)])
    distinct = {text for said in group for _, _, text in belief_prompts(TASK, said)}
    assert scored == [len(distinct)] and len(distinct) < sum(len(belief_prompts(TASK, said)) for said in group)
    for i, gains in enumerate(alone):
        assert together[str(i)] == pytest.approx(gains, abs=1e-4)


def test_the_gain_enters_its_turns_reward_and_a_filtered_turn_gains_nothing() -> None:
    turns = {A: [SeatTurn(turn=0, prompt="", text="My friends:\n1. Cara Ford", prompt_ids=[], token_ids=[1],
                          logprobs=[]),
                 SeatTurn(turn=2, prompt="", text="My friends:\n1. Cara Ford", prompt_ids=[], token_ids=[1],
                          logprobs=[])],  # the same again: the filter's `repeated`
             B: [SeatTurn(turn=1, prompt="", text="My friends:\n1. Milo Evans", prompt_ids=[], token_ids=[1],
                          logprobs=[])]}
    rollout = Rollout(rollout_id="r", task_id=TASK.task_id, iteration=0, sample=0,
                      seats=[SeatTrajectory(seat=s, role=r, turns=turns[s]) for s, r in ((A, "opener"),
                                                                                       (B, "responder"))])
    score(rollout, TASK, RewardConfig(belief=0.5), belief={0: 1.5, 1: -0.4, 2: 2.0})
    rewards = {t.turn: t.reward for s in rollout.seats for t in s.turns}
    assert rewards == {0: pytest.approx(0.75), 1: pytest.approx(-0.2), 2: 0.0}
    score(rollout, TASK, RewardConfig(), belief={0: 1.5, 1: -0.4, 2: 2.0})  # weight 0: off
    assert {t.turn: t.reward for s in rollout.seats for t in s.turns} == {0: 0.0, 1: 0.0, 2: 0.0}


def test_the_shuffled_control_permutes_the_same_gains_to_the_same_draw() -> None:
    gains = {("r1", 0): 1.0, ("r1", 2): -0.5, ("r2", 0): 0.0, ("r2", 2): 2.5, ("r3", 1): 0.25}
    once, again = shuffled(gains, 7), shuffled(gains, 7)
    assert once == again and sorted(once.values()) == sorted(gains.values()) and set(once) == set(gains)
    assert once != gains


def test_a_self_play_iteration_records_and_mixes_in_the_gains(tiny_gguf_llama: Path, tmp_path: Path) -> None:
    """The score step computes each training message's gain under the sampling checkpoint, records it on the turn
    and adds ``belief`` x gain to the turn's reward; scored again it reads the recorded gains back (same rewards),
    and the shuffled-turn control mixes in the same gains, permuted."""
    pytest.importorskip("torch")
    from swm.checkpoints import ExperienceStore
    from swm.selfplay import loop
    from swm.selfplay import store as sps
    from swm.selfplay.plan import SelfPlayPlan

    def iteration(shuffle: bool, out: Path) -> list[Rollout]:
        plan = SelfPlayPlan.model_validate({
            "run_id": "belief", "iterations": 1, "family": "mutual_friend", "level": "multi-turn",
            "tasks_per_iteration": 1, "group_size": 2, "eval_tasks": 0, "out_dir": str(out),
            "policy": {"base": str(tiny_gguf_llama), "sampler": "torch", "lora_r": 4, "lora_alpha": 8,
                       "max_new_tokens": 4, "autocast": "off"},
            "reward": {"belief": 1.0, "belief_shuffle": shuffle, "quality_filter": False}})
        store = ExperienceStore(out / "run.db")
        loop.ensure_initial_checkpoint(plan)
        for job in loop.rollout_jobs(plan, store, 0):
            loop.run_rollout(plan, store, job, 0)
        loop.score_rollouts(plan, store, 0, "train")
        first = sps.load_rollouts(store, plan.run_id, 0, "train")
        loop.score_rollouts(plan, store, 0, "train")
        again = sps.load_rollouts(store, plan.run_id, 0, "train")
        assert [r.model_dump() for r in again] == [r.model_dump() for r in first], "rescoring changes nothing"
        return first

    plain = iteration(False, tmp_path / "plain")
    turns = [(r, s, t) for r in plain for s in r.seats for t in s.turns]
    assert turns and all(t.belief is not None for _, _, t in turns)
    for _, s, t in turns:
        outcome = s.outcome if t is s.turns[-1] else 0.0
        assert t.reward == pytest.approx(outcome + float(t.belief or 0.0))
    control = iteration(True, tmp_path / "control")
    assert [t.belief for r in control for s in r.seats for t in s.turns] == [t.belief for _, _, t in turns]
    mixed = sorted(t.reward - (s.outcome if t is s.turns[-1] else 0.0) for r in control for s in r.seats
                   for t in s.turns)
    assert mixed == pytest.approx(sorted(float(t.belief or 0.0) for _, _, t in turns))
