"""Export: JSONL that `datasets.load_dataset("json", ...)` loads, and a readable transcript."""

from __future__ import annotations

import json
from pathlib import Path

from test_episode_scripts import SECRETS, model, scenario

from swm.checkpoints import ExperienceStore, sqlite_saver
from swm.context import SWMContext
from swm.graphs.episode import build
from swm.social.export import episode_row, transcript, write_jsonl
from swm.state import SocialWorld


def _episodes(tmp_path: Path) -> tuple[ExperienceStore, list[str]]:
    store = ExperienceStore(tmp_path / "s.db")
    ids = []
    with sqlite_saver(tmp_path / "cp.db") as saver:
        graph = build().compile(checkpointer=saver)
        for i, (n, policy, turns) in enumerate([(2, "foresee", 3), (3, "plain", 4), (2, "lookahead", 2)]):
            ctx = SWMContext(llm=model(), store=store, lookahead_width=2, lookahead_depth=1)
            out = graph.invoke({"scenario": scenario(n, sid=f"s{i}").model_dump(), "episode_id": f"e{i}",
                                "policies": {"Ann": policy}, "max_turns": turns},
                               {"configurable": {"thread_id": f"e{i}"}}, context=ctx)
            ids.append(out["episode_id"])
    return store, ids


def test_jsonl_loads_with_datasets(tmp_path: Path) -> None:
    import datasets

    store, ids = _episodes(tmp_path)
    path = tmp_path / "episodes.jsonl"
    assert write_jsonl(store, ids, path) == 3
    ds = datasets.load_dataset("json", data_files=str(path), split="train")
    assert ds.num_rows == 3 and ds["episode_id"] == ids
    assert [len(t) for t in ds["turns"]] == [3, 4, 2]
    assert {"scenario", "agents", "turns", "social_world", "scores", "models", "prompts"} <= set(ds.column_names)
    first = ds[0]
    assert first["scores"][0]["agent"] == "Ann" and first["scores"][0]["goal"] == 5
    assert any(p["id"] == "foresee_refine@v3" for p in first["prompts"])
    assert SocialWorld.from_s3ap(json.loads(first["social_world"])).agents == ["Ann", "Bob"]
    assert first["turns"][0]["prediction"] is not None and first["agents"][1]["secret"] == SECRETS["Bob"]


def test_transcript_is_readable(tmp_path: Path) -> None:
    store, ids = _episodes(tmp_path)
    text = transcript(store, ids[0])
    assert 'Turn #0 Ann [foresee, 3 calls]: Ann said: "line 1"' in text and "intended: speak: line 0" in text
    assert "predicted reaction of Bob at 0+1 (predicted): speak: too much" in text
    assert "predicted mental state of Bob: wary" in text and "Judge — Ann: believability 5" in text
    assert "Ended: turn limit (3) after 3 turns." in text
    row = episode_row(store, ids[2])
    assert row["lookahead_width"] == 2 and row["turns"][0]["candidates"] is not None


def test_swm_play_exports_and_prints_json(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from swm.cli import main

    llm = model()
    path = tmp_path / "one.jsonl"
    result = CliRunner().invoke(main, ["play", "--scenario", "swm-flat-chores", "--policy", "lookahead", "--width", "2",
                                       "--max-turns", "3", "--db", str(tmp_path / "p.db"), "--export", str(path),
                                       "--json"], obj={"llm": llm})
    assert result.exit_code == 0, result.output
    row = json.loads(path.read_text())
    assert row["scenario_id"] == "swm-flat-chores" and len(row["agents"]) == 3 and row["num_turns"] == 3
    # turn 0 is the look-ahead seat (2 + 2 + 2 + 1 calls), then two plain turns, then 1 judge call for all three.
    assert [t["calls"] for t in row["turns"]] == [7, 1, 1] and llm.calls == 7 + 2 + 1
    assert '"episode_id"' in result.output
