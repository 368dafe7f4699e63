"""`swm selfplay`'s defaults are the recipe that learned, its preset the page's run; training tasks never repeat."""

from __future__ import annotations

from typing import Any

import pytest

from bench.two_seat import parser
from bench.two_seat import plan_of as bench_plan
from swm.commands.learn import learn_command
from swm.commands.selfplay_cmd import PRESETS, apply_preset, selfplay_command, selfplay_plan
from swm.selfplay.plan import RECIPE_PPO, SelfPlayPlan, training_seed
from swm.tasks.families import MULTI_TURN, TWO_SEAT

# options both commands take whose defaults differ on purpose: each writes its own run folder, and swm learn's
# batch holds whole decision or episode samples (up to --train-max-length tokens) where self-play's holds turns
DIFFERENT_ON_PURPOSE = {"--out", "--train-batch-size"}


def plan_of(*args: str) -> SelfPlayPlan:
    ctx = selfplay_command.make_context("selfplay", list(args))
    params: dict[str, Any] = dict(ctx.params)
    return selfplay_plan("t", apply_preset(ctx, params.pop("preset"), params))


def test_the_task_alone_gets_the_recipe_that_learned() -> None:
    plan = plan_of("--family", "mutual_friend", "--level", TWO_SEAT)
    assert plan.advantage.estimator == "group"
    assert (plan.ppo.lr, plan.ppo.epochs, plan.ppo.minibatch, plan.ppo.kl_coef) == (2e-4, 1, 8, 0.0)
    assert plan.ppo == RECIPE_PPO and (plan.tasks_per_iteration, plan.group_size) == (4, 8)
    assert SelfPlayPlan().ppo == RECIPE_PPO and SelfPlayPlan().advantage.estimator == "group"
    assert plan_of("--train-epochs", "2", "--train-batch-size", "4").ppo.model_dump(include={"epochs", "minibatch"}) \
        == {"epochs": 2, "minibatch": 4}


def test_a_family_without_the_level_is_refused_in_one_line() -> None:
    from swm.errors import InputError

    with pytest.raises(InputError, match="no multi-turn tasks of family 'scheduling'"):
        plan_of("--family", "scheduling", "--level", MULTI_TURN)


def test_a_preset_sets_what_was_not_given_and_a_given_option_wins() -> None:
    plan = plan_of("--preset", "two-seat-2026-11")
    assert (plan.family, plan.level, plan.names, plan.iterations, plan.eval_tasks) == (
        "mutual_friend", TWO_SEAT, "shared", 16, 200)
    assert plan.ppo.model_dump(include={"lr", "epochs", "minibatch", "kl_coef"}) == {
        "lr": 2e-4, "epochs": 1, "minibatch": 8, "kl_coef": 0.0}
    given = plan_of("--preset", "two-seat-2026-11", "--iterations", "3", "--names", "disjoint")
    assert (given.iterations, given.names, given.eval_tasks) == (3, "disjoint", 200)
    assert all(set(preset) <= set(selfplay_command.make_context("selfplay", []).params) for preset in PRESETS.values())


def test_the_conversation_preset_is_the_four_message_run_with_belief_gains_and_turn_level_groups() -> None:
    plan = plan_of("--preset", "multi-turn-4-2026-12")
    assert (plan.level, plan.advantage.estimator, plan.reward.belief, plan.reward.belief_shuffle) == (
        "multi-turn-4", "group-turn", 0.5, False)
    assert (plan.iterations, plan.stage, plan.tasks_per_iteration, plan.group_size) == (6, 1, 4, 8)
    assert plan.ppo.model_dump(include={"lr", "epochs", "minibatch", "kl_coef"}) == {
        "lr": 2e-4, "epochs": 1, "minibatch": 8, "kl_coef": 0.0}


def test_the_answer_credit_preset_is_the_plan_the_results_page_ran() -> None:
    """``--preset multi-turn-4-2026-12-03`` is the plan of the page's ``bench.two_seat`` command (its self-play
    arm), field by field, so ``swm selfplay --from … --preset …`` reruns what the page measured."""
    args = parser().parse_args(["--level", "multi-turn-4", "--estimator", "group-turn", "--belief", "0.5",
                                "--answer-reward", "0.5", "--tasks", "8", "--group", "8", "--iterations", "6",
                                "--stage", "1", "--seed", "0"])
    page = SelfPlayPlan.model_validate(bench_plan(args, "selfplay"))
    mine = plan_of("--preset", "multi-turn-4-2026-12-03")
    fields = {"family", "level", "names", "iterations", "tasks_per_iteration", "group_size", "stage", "seed",
              "shuffle_rewards"}
    assert mine.model_dump(include=fields) == page.model_dump(include=fields)
    for part in ("ppo", "advantage", "reward"):
        assert getattr(mine, part) == getattr(page, part), part
    assert mine.policy.model_dump(include={"temperature", "lora_r", "lora_alpha", "autocast", "score_old"}) == \
        page.policy.model_dump(include={"temperature", "lora_r", "lora_alpha", "autocast", "score_old"})
    assert (mine.reward.answer, mine.reward.belief, mine.tasks_per_iteration) == (0.5, 0.5, 8)
    assert mine.policy.served_format == "shipped", "the page sampled on the shipped Q4_1 base (before F16 was default)"


def test_an_option_both_commands_take_has_the_same_default() -> None:
    def defaults(command: Any) -> dict[str, Any]:
        return {o: p.default for p in command.params for o in p.opts if o.startswith("--")}

    mine, learns = defaults(selfplay_command), defaults(learn_command)
    shared = set(mine) & set(learns)
    assert {"--estimator", "--train-lr", "--train-epochs", "--train-rank", "--max-turns", "--temperature",
            "--names"} <= shared
    assert {o for o in shared if mine[o] != learns[o]} == DIFFERENT_ON_PURPOSE


def test_training_tasks_of_different_seeds_stages_and_iterations_never_meet() -> None:
    seeds = [training_seed(seed, stage, i, k) for seed in range(4) for stage in range(3) for i in range(16)
             for k in range(8)]
    assert len(set(seeds)) == len(seeds) and min(seeds) > 2_000_000
    # the old rule, seed + 1000 * iteration + i, made seed 1 replay 3 of seed 0's 4 tasks every iteration

    def content(seed: int, stage: int) -> set[tuple[str, ...]]:
        plan = SelfPlayPlan(family="mutual_friend", level=TWO_SEAT, tasks_per_iteration=4, seed=seed, stage=stage)
        return {tuple(sorted(map(str, t.truth["lists"]))) for i in range(8) for t in plan.training_tasks(i)}

    first = content(0, 0)
    assert len(first) == 32 and not first & content(1, 0) and not first & content(0, 1)


@pytest.mark.parametrize("level", [TWO_SEAT, MULTI_TURN])
def test_a_stage_of_the_same_seed_draws_other_tasks(level: str) -> None:
    one, two = (SelfPlayPlan(family="mutual_friend", level=level, stage=s).training_tasks(0) for s in (0, 1))
    assert not {t.task_id for t in one} & {t.task_id for t in two}


def test_the_documented_curriculum_hands_each_stages_adapter_to_the_next() -> None:
    import shlex
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "selfplay.md").read_text()
    block = text.split("## The curriculum, one command sequence", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    stages = [shlex.split(line) for line in block.replace("\\\n", " ").splitlines() if line.strip()]
    assert [s[1] for s in stages] == ["learn", "selfplay", "selfplay", "selfplay", "selfplay"]

    def option(words: list[str], name: str) -> str | None:
        return words[words.index(name) + 1] if name in words else None

    def run(words: list[str]) -> str:
        return f"{option(words, '--out')}/{option(words, '--thread-id')}"

    levels = [option(s, "--level") or option(s, "--levels") or PRESETS[str(option(s, "--preset"))]["level"]
              for s in stages]
    assert levels == ["decision", TWO_SEAT, "multi-turn-4", "multi-turn-4", MULTI_TURN]
    learned, two_seat = option(stages[0], "--out"), run(stages[1])
    assert option(stages[1], "--from") == learned and option(stages[2], "--from") == two_seat
    assert option(stages[2], "--estimator") == "rs" and option(stages[3], "--from") == run(stages[2])
    assert option(stages[4], "--from") == two_seat
