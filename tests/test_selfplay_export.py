"""``swm selfplay --export``: each seat of every finished rollout as TRL messages with its rewards, a card, no key.

The first tests write rollouts into a store by hand (no model); the last runs ``swm selfplay`` on the tiny random
Llama with ``--export`` and loads the folder back with ``datasets.load_dataset``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from swm.checkpoints import ExperienceStore
from swm.cli import main
from swm.errors import InputError
from swm.selfplay.export import COLUMNS, export_from_db, export_run
from swm.selfplay.plan import SelfPlayPlan
from swm.selfplay.store import put_rollout, put_run
from swm.training.trajectory import Rollout, SeatTrajectory, SeatTurn

datasets = pytest.importorskip("datasets")
KEY = "sk-SEKRET-0123456789"


def turn(index: int, prompt: str, text: str, reward: float = 0.0) -> SeatTurn:
    return SeatTurn(turn=index, prompt=prompt, text=text, prompt_ids=[1, 2], token_ids=[3, 4, 5], logprobs=[-1.0] * 3,
                    reward=reward)


def rollout(rid: str, iteration: int, *, failed: str | None = None, deal: bool = True) -> Rollout:
    seller = SeatTrajectory(seat="Ava", role="seller", outcome=1.0 if deal else 0.0,
                            violations=[] if deal else ["price_below_minimum"],
                            turns=[turn(0, "You sell a bike.", "I can offer it for $500."),
                                   turn(2, "Noah: Would $480 work?", "$490, final.", 1.0 if deal else 0.0)])
    buyer = SeatTrajectory(seat="Noah", role="buyer", outcome=1.0 if deal else 0.0,
                           turns=[turn(1, "You buy a bike.", "Would $480 work?", 1.0 if deal else 0.0)])
    return Rollout(rollout_id=rid, task_id="train:negotiation:easy:7", family="negotiation", iteration=iteration,
                   sample=0, seats=[seller, buyer], order=["Ava", "Noah", "Ava"], end_reason="settled",
                   verdict={"completion": deal, "violations": []}, failed=failed, tokens=9)


def filled_store(db: Path, run_id: str = "sp") -> ExperienceStore:
    store = ExperienceStore(db)
    put_run(store, run_id, SelfPlayPlan(run_id=run_id, iterations=2))
    put_rollout(store, run_id, "train", rollout(f"{run_id}/i0/train/t7/g0", 0))
    put_rollout(store, run_id, "train", rollout(f"{run_id}/i0/train/t7/g1", 0, failed="turn 1: ValueError: no"))
    put_rollout(store, run_id, "train", rollout(f"{run_id}/i1/train/t8/g0", 1, deal=False))
    put_rollout(store, run_id, "eval", rollout(f"{run_id}/i0/eval/t9/g0", 0))
    return store


def test_each_seat_of_a_finished_rollout_is_a_row_of_trl_messages_that_loads_as_train_and_test(tmp_path: Path) -> None:
    store = filled_store(tmp_path / "run.db")
    out = tmp_path / "export"
    done = export_run(store, "sp", out)
    assert [(c.phase, c.iteration, c.checkpoint, c.rollouts, c.failed, c.rows) for c in done] == [
        ("train", 0, 0, 2, 1, 2), ("train", 1, 1, 1, 0, 2), ("eval", 0, 1, 1, 0, 2)]
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.jsonl")) == [
        "eval/iter0.jsonl", "train/iter0.jsonl", "train/iter1.jsonl"]
    loaded = datasets.load_dataset(str(out))
    assert set(loaded) == {"train", "test"}  # datasets reads the folder named eval as the test split
    train = loaded["train"]
    assert train.column_names == list(COLUMNS) and train.num_rows == 4
    ava = next(r for r in train if r["seat"] == "Ava" and r["iteration"] == 0)
    assert [m["role"] for m in ava["messages"]] == ["user", "assistant", "user", "assistant"]
    assert ava["messages"][3]["content"] == "$490, final." and ava["turns"] == [0, 2]
    assert ava["reward"] == 1.0 and ava["turn_rewards"] == [0.0, 1.0] and ava["completion"] is True
    assert ava["tokens"] == 6 and json.loads(ava["verdict"])["completion"] is True and ava["filtered"] == ["", ""]
    assert {r["reward"] for r in train if r["iteration"] == 1} == {0.0}
    # iteration 0's file has no broken rule and iteration 1's has one: the column has one type across the files
    assert sorted(r["violations"] for r in train) == ["", "", "", "price_below_minimum"]
    test = loaded["test"]
    assert test.num_rows == 2 and set(test["phase"]) == {"eval"} and set(test["checkpoint"]) == {1}
    card = (out / "README.md").read_text()
    assert "| train | 0 | 0 | 2 | 1 | 2 | `train/iter0.jsonl` |" in card  # the failed rollout counted, left out
    assert "| eval | 0 | 1 | 1 | 0 | 2 | `eval/iter0.jsonl` |" in card and "negotiation (easy)" in card
    # an export of another run to the same folder leaves none of this one's files behind
    put_rollout(store, "other", "train", rollout("other/i0/train/t1/g0", 0))
    export_run(store, "other", out)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.jsonl")) == ["train/iter0.jsonl"]
    assert set(datasets.load_dataset(str(out), split="train")["run_id"]) == {"other"}


def test_an_empty_export_is_refused_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    store = ExperienceStore(tmp_path / "run.db")
    with pytest.raises(InputError, match="nothing to export for self-play run 'sp': no rollout of it is stored"):
        export_run(store, "sp", tmp_path / "none")
    put_rollout(store, "sp", "train", rollout("sp/i0/train/t7/g0", 0, failed="turn 0: RuntimeError: boom"))
    with pytest.raises(InputError, match="all 1 of its rollouts failed") as err:
        export_from_db(tmp_path / "run.db", "sp", tmp_path / "none")
    assert "\n" not in err.value.one_line()
    assert not list((tmp_path / "none").rglob("*.jsonl")), "no empty file for load_dataset to trip on"


def test_a_key_the_store_could_not_hide_never_reaches_the_export(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A store written before the key was configured (another process): the export masks it all the same."""
    from swm import credentials  # noqa: PLC0415

    monkeypatch.setattr(credentials, "_known", {})  # a key an earlier test gave this process in a URL is not known
    store = filled_store(tmp_path / "run.db")
    quoted = rollout("sp/i2/train/t7/g0", 2).model_copy(update={"sampler": f"http://swm:{KEY}@127.0.0.1:8000/v1"})
    quoted.seats[0].turns[0].text = f"my key is {KEY}"
    put_rollout(store, "sp", "train", quoted)
    (kept,) = store.rows("select rollout from selfplay_rollouts where rollout_id = ?", ["sp/i2/train/t7/g0"])
    assert f"my key is {KEY}" in kept["rollout"], "a key the store was not told of is stored as it is"
    monkeypatch.setenv("SWM_API_KEY_127_0_0_1", KEY)
    export_run(store, "sp", tmp_path / "export")
    files = [p for p in (tmp_path / "export").rglob("*") if p.is_file()]
    assert files and not [p for p in files if KEY.encode() in p.read_bytes()]
    rows = datasets.load_dataset(str(tmp_path / "export"), split="train")
    assert "my key is ***" in {r["messages"][1]["content"] for r in rows}
    assert not [r for r in rows if KEY in r["sampler"]]


@pytest.mark.timeout(600)
def test_swm_selfplay_exports_a_run_that_load_dataset_reads_with_no_key_in_it(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from test_lifelong_train import tiny_llama

    base = tiny_llama(tmp_path / "model")
    monkeypatch.setenv("SWM_API_KEY_127_0_0_1", KEY)  # a key in the environment and in a URL given on the line
    db, export = tmp_path / "cli.db", tmp_path / "export"
    args = ["selfplay", "--base", str(base), "--iterations", "1", "--tasks", "1", "--group", "2", "--max-turns", "2",
            "--eval-tasks", "1", "--max-new-tokens", "3", "--train-rank", "4", "--sampler", "torch",
            "--judge-model", f"judge@http://swm:{KEY}@127.0.0.1:9/v1", "--out", str(tmp_path / "out"),
            "--db", str(db), "--thread-id", "exp", "--export", str(export), "--no-progress"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output[-3000:]
    assert "export: 4 train and 2 eval seat rows of 3 rollouts" in result.stderr
    loaded = datasets.load_dataset(str(export))
    assert (loaded["train"].num_rows, loaded["test"].num_rows) == (4, 2)
    assert set(loaded["train"]["role"]) == {"buyer", "seller"} and set(loaded["train"]["run_id"]) == {"exp"}
    assert all(m["content"] for r in loaded["train"] for m in r["messages"])
    leaks = [p for p in tmp_path.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert leaks == [] and KEY not in result.output
    # the finished thread exports at once, with the same rows
    again = CliRunner().invoke(main, [*args[:-3], "--export", str(tmp_path / "again"), "--no-progress"])
    assert again.exit_code == 0, again.output[-3000:]
    assert (tmp_path / "again" / "train" / "iter0.jsonl").read_text() == (export / "train" / "iter0.jsonl").read_text()
