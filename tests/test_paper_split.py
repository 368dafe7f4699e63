"""`swm bench tom --paper-split`: the S3AP repository's split manifests select and verify the paper's records."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from swm.commands.bench_tom_run import _load_items
from swm.errors import InputError
from swm.tom.loaders import load_benchmark
from swm.tom.splits import canonical_hash, file_sha256, manifests, select_paper_split

FIX = Path(__file__).parent / "fixtures" / "tom"


def test_the_record_hash_is_the_manifest_generators() -> None:
    # generate_split_manifests.py: json.dumps(record, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    expected = hashlib.sha256('{"a":"é","b":[1,2]}'.encode()).hexdigest()
    assert canonical_hash({"b": [1, 2], "a": "é"}) == expected


def test_the_bundled_manifests_are_the_repository_splits() -> None:
    data = manifests()
    assert data["source"]["commit"] == "b9e0766486b2d535cde841872ab3fc952d68df06"
    counts = {name: spec["records"] for name, spec in data["benchmarks"].items()}
    assert counts == {"tomi": 600, "paratomi": 600, "fantom": 64, "hitom": 100, "mmtom": 600}
    assert len(data["benchmarks"]["hitom"]["manifest"]) == 100 and len(data["benchmarks"]["fantom"]["manifest"]) == 64
    hashes = [row[-1] for name in ("hitom", "fantom") for row in data["benchmarks"][name]["manifest"]]
    assert len(set(hashes)) == 164 and all(len(h) == 64 and int(h, 16) >= 0 for h in hashes)
    # MMToM-QA's manifest is of the upstream questions.json, whose SHA-256 the shared sample's README records too
    assert data["benchmarks"]["mmtom"]["file_sha256"].startswith("54a6b908f793")


def test_the_paper_file_is_verified_whole_and_another_file_is_refused(tmp_path: Path) -> None:
    items = load_benchmark("tomi", FIX / "percept_tomi_mini.csv")
    path = FIX / "percept_tomi_mini.csv"
    spec = {"tomi": {"file": "Percept-ToMi.csv", "records": len(items), "bytes": path.stat().st_size,
                     "file_sha256": file_sha256(path), "origin": "here"}}
    chosen, match = select_paper_split("tomi", path, items, spec)
    assert chosen == items and match.how == "exact" and match.hashes_verified == len(items)
    with pytest.raises(InputError, match="not the file behind the paper's tomi numbers"):
        select_paper_split("tomi", path, items)  # the bundled manifest: the mini file is not Percept-ToMi.csv


def test_fantom_is_selected_by_set_id_in_manifest_order_and_each_record_checked(tmp_path: Path) -> None:
    first = json.loads((FIX / "fantom_mini.json").read_text())[0]
    records = [first, {**first, "set_id": "c2-p1-s1"}]
    path = tmp_path / "fantom.json"
    path.write_text(json.dumps(records))
    items = load_benchmark("fantom", path)
    manifest = [["c2-p1-s1", "", "", canonical_hash(records[1])], [first["set_id"], "", "", "0" * 64],
                ["absent", "", "", "1" * 64]]
    spec = {"fantom": {"file": "f", "records": 3, "bytes": 0, "file_sha256": "x", "origin": "o", "manifest": manifest}}
    chosen, match = select_paper_split("fantom", path, items, spec)
    assert chosen[0].group == "c2-p1-s1" and chosen[-1].group == first["set_id"], "the manifest's order"
    assert len(chosen) == len(items)
    assert (match.how, match.found, match.expected, match.hashes_verified) == ("identifier", 2, 3, 1)
    assert "PARTIAL: 1 not in this file" in match.line() and "1 record hashes verified" in match.line()


def test_the_shared_hitom_sample_holds_52_of_the_paper_questions(shared_dir: Path) -> None:
    path = shared_dir / "benchmarks" / "hitom" / "hitom_cotp_sample300.jsonl"
    items, label, line = _load_items("hitom", path, 1, "short", None, 0, paper_split=True)
    assert label == "hitom" and len(items) == 52
    order = [row[0] for row in manifests()["benchmarks"]["hitom"]["manifest"]]
    assert [i.meta["source_index"] for i in items] == [x for x in order if x in {i.meta["source_index"] for i in items}]
    assert "matched by identifier, 52 of 100 records (PARTIAL: 48 not in this file)" in line


def test_benchmarks_without_a_manifest_and_wrong_files_are_clear_errors(shared_dir: Path) -> None:
    with pytest.raises(InputError, match="publishes no split manifest for confaide"):
        _load_items("confaide", FIX / "confaide_tier_4_mini.txt", 1, "short", None, 0, paper_split=True)
    with pytest.raises(InputError, match="not the file behind the paper's mmtom numbers"):
        _load_items("mmtom", shared_dir / "benchmarks" / "mmtom" / "mmtom_text_sample300.jsonl", 1, "short", None, 0,
                    paper_split=True)
    with pytest.raises(InputError, match="simulator has no paper split"):
        _load_items("sim", None, 1, "short", 2, 0, paper_split=True)


def test_a_run_keeps_the_prompt_protocol_it_was_started_with(tmp_path: Path) -> None:
    from swm.checkpoints import open_store
    from swm.tom.runner import record_run

    store = open_store(tmp_path / "runs.db")
    meta = {"benchmark": "tomi", "data": "d", "seed": 0, "n": None, "prompt_protocol": "paper",
            "prompt_set": "parse_paper@v2,task_tomi@v1"}
    record_run(store, "r", meta)
    record_run(store, "r", meta)  # the same settings resume
    with pytest.raises(InputError, match="prompt_protocol=paper, not swm"):
        record_run(store, "r", {**meta, "prompt_protocol": "swm"})
    with pytest.raises(InputError, match="prompt_set=parse_paper@v2"):  # the protocol's wording changed since
        record_run(store, "r", {**meta, "prompt_set": "parse_paper@v3,task_tomi@v1"})
    record_run(store, "old", {k: v for k, v in meta.items() if k not in ("prompt_protocol", "prompt_set")})
    record_run(store, "old", meta)  # a run recorded before protocols were has none to compare


def test_a_run_recorded_as_paper_before_the_appendix_wording_resumes_as_repo(tmp_path: Path) -> None:
    from swm.checkpoints import open_store
    from swm.tom.runner import record_run

    store = open_store(tmp_path / "runs.db")
    before = {"benchmark": "tomi", "data": "d", "seed": 0, "n": None, "prompt_protocol": "paper"}
    record_run(store, "r", before)
    with pytest.raises(InputError, match="prompt_protocol=repo, not paper") as refused:
        record_run(store, "r", {**before, "prompt_set": "parse_paper@v2"})
    assert "--prompts repo" in str(refused.value.hint)
    record_run(store, "r", {**before, "prompt_protocol": "repo", "prompt_set": "parse_paper@v1"})


def test_every_run_names_its_split_with_the_benchmarks_caveat(shared_dir: Path) -> None:
    tomi = shared_dir / "benchmarks" / "tomi" / "tomi_test_sample300.jsonl"
    items, _, line = _load_items("tomi", tomi, 1, "short", 5, 0, paper_split=False)
    assert len(items) == 5
    assert line.startswith(f"sample, not the paper's split: 5 of 300 questions drawn with seed 0 of {tomi}")
    assert "802,151 B, 9109505e" in line and "e13bfed0" in line  # the public Percept-ToMi.csv is not the paper's
    mmtom = shared_dir / "benchmarks" / "mmtom" / "mmtom_text_sample300.jsonl"
    _, _, line = _load_items("mmtom", mmtom, 1, "short", None, 0, paper_split=False)
    assert line.startswith("sample, not the paper's split: all 300 questions")
    assert "300/302-question subset that cannot be recovered" in line and "600 candidates" in line
    hitom = shared_dir / "benchmarks" / "hitom" / "hitom_cotp_sample300.jsonl"
    _, _, line = _load_items("hitom", hitom, 1, "short", 4, 0, paper_split=True)
    assert line.startswith("paper split: hitom: matched by identifier, 52 of 100") and "run: 4 of 52 questions" in line
    _, _, line = _load_items("sim", None, 1, "short", 2, 0, paper_split=False)
    assert line.startswith("simulated stories, no benchmark split")


def test_a_run_keeps_the_split_it_was_started_with(tmp_path: Path) -> None:
    from swm.checkpoints import open_store
    from swm.tom.runner import record_run

    store = open_store(tmp_path / "runs.db")
    meta = {"benchmark": "hitom", "data": "d", "seed": 0, "n": None, "prompt_protocol": "paper",
            "prompt_set": "parse_paper@v2", "split": "paper split: hitom: matched by identifier, 52 of 100 records"}
    record_run(store, "r", meta)
    with pytest.raises(InputError, match="split=paper split"):
        record_run(store, "r", {**meta, "split": "sample, not the paper's split: all 300 questions of d"})
    record_run(store, "old", {k: v for k, v in meta.items() if k != "split"})
    record_run(store, "old", meta)  # recorded before splits were named: nothing to compare
