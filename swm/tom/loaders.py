"""Load theory-of-mind benchmarks from the formats researchers have on disk into `TomItem`s.

* ToMi and ParaToMi in their original bAbI form: ``*.txt`` (numbered lines; numbering restarts at
  1 for each story; a question line is ``N question<TAB>answer<TAB>supporting line``) with the
  ``*.trace`` beside it (one comma-separated line per question: the event trace, then the
  question type, then the story type);
* Hi-ToM's ``Hi-ToM_data.json`` (``{"data": [...]}``; the options are a ``"A. x, B. y"`` string,
  the answer is the option text; only the ``CoTP`` half is used by default, as the paper does);
* MMToM-QA's ``questions.json`` (JSON Lines; the story and question are split at
  ``"\\nQuestion: "``; the answer is ``a`` or ``b``);
* FANToM's ``fantom_v1.json`` (a list of question sets, each with ``set_id``, ``short_context``,
  ``full_context``, ``factQA``, ``beliefQAs``, ``answerabilityQA_list``,
  ``answerabilityQAs_binary``, ``infoAccessibilityQA_list``, ``infoAccessibilityQAs_binary``);
* Percept-ToMi's ``dataset/Percept-ToMi.csv`` (``chanijung/PercepToM``; the 600 ToMi questions
  the S3AP paper reports; columns ``index, qTypeRaw, qType, story, question, char1, char2,
  perceivers, story_with_perceivers, persp_ctx, cands, answer``, where ``story`` and ``cands``
  are Python list literals of sentences and candidate names);
* ConfAIde's tier files (`swm.tom.confaide`);
* the uniform JSONL ``{id, story, question, answer, meta}`` of the samples in ``../shared/benchmarks``.

Each benchmark is a row of `swm.tom.items.BENCHMARKS`, registered here with its loader, parser task and
rules; `swm bench tom --benchmark` offers the table's rows (docs/contributing.md, "Adding a ToM benchmark").
"""

from __future__ import annotations

import ast
import csv
import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swm.errors import InputError
from swm.inputs import jsonl_rows, read_text_file, refuse_duplicate_ids
from swm.tom.confaide import load_confaide
from swm.tom.items import BENCHMARKS, Benchmark, LoadOptions, TomItem, benchmark_names, register_benchmark
from swm.tom.rules import HEADLINE, VARIANTS

__all__ = ["BENCHMARKS", "TomItem", "benchmark_names", "load_benchmark", "select"]


def _read_json(path: Path) -> Any:
    try:
        return json.loads(read_text_file(path))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path} is not valid JSON: {exc}", "check the file, or pass the JSONL form") from exc


def _read_jsonl(path: Path, required: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    return [row for _, row in jsonl_rows(path, required)]


# ---- ToMi / ParaToMi (bAbI) -----------------------------------------------------------------
_LINE_RE = re.compile(r"^\s*(\d+)\s+(.*)$")


def load_babi(path: str | Path, benchmark: str = "tomi") -> list[TomItem]:
    """Read ToMi/ParaToMi ``*.txt`` (and its ``*.trace`` when present) into items.

    Each question sees the story lines since the last line numbered 1, question lines excluded.
    The question type is the trace's second-to-last field with ``_0_``/``_1_`` folded (as in
    ``first_order_tom``); without a trace it is read off the question's wording.
    """
    path = Path(path)
    trace_path = path.with_suffix(".trace")
    traces = trace_path.read_text(encoding="utf-8").splitlines() if trace_path.is_file() else []
    items: list[TomItem] = []
    story: list[str] = []
    for number, raw in enumerate(read_text_file(path).splitlines(), 1):
        if not raw.strip():
            continue
        match = _LINE_RE.match(raw)
        if match is None:
            raise InputError(f"{path}:{number} does not start with a line number", "is this a bAbI-format file?")
        index, text = int(match[1]), match[2]
        if index == 1:
            story = []
        if "\t" not in text:
            story.append(text.strip())
            continue
        parts = text.split("\t")
        question, answer = parts[0].strip(), parts[1].strip()
        q_index = len(items)
        meta: dict[str, Any] = {"source_line": number, "source_question_index": q_index}
        if q_index < len(traces):
            fields = [f.strip() for f in traces[q_index].split(",") if f.strip()]
            if len(fields) >= 2:
                meta.update(question_type=fields[-2], story_type=fields[-1], trace=fields[:-2])
        raw_type = meta.get("question_type") or _tomi_type_from_question(question)
        items.append(TomItem(id=f"{benchmark}-{path.stem}-{q_index:05d}", story="\n".join(story),
                             question=question, answer=answer, qtype=coarse_tomi_type(raw_type),
                             benchmark=benchmark, kind="location", meta=meta))
    return items


def coarse_tomi_type(raw: str) -> str:
    """Fold ToMi's agent-order digit: ``first_order_1_no_tom`` → ``first_order_no_tom``."""
    return re.sub(r"_[01]_", "_", raw)


def _tomi_type_from_question(question: str) -> str:
    q = question.lower()
    if "at the beginning" in q:
        return "memory"
    if "really" in q:
        return "reality"
    if "think" in q:
        return "second_order"
    return "first_order"


def load_percept_tomi(path: str | Path, benchmark: str = "tomi") -> list[TomItem]:
    """Read Percept-ToMi's CSV (``chanijung/PercepToM``, ``dataset/Percept-ToMi.csv``).

    The story's sentences become one line each, with a final period; the question type is
    ``qType`` (ToMi's type with the agent-order digit folded), the raw one is kept in ``meta``.
    """
    path = Path(path)
    items = []
    with path.open(encoding="utf-8", newline="") as handle:
        for number, row in enumerate(csv.DictReader(handle), 2):
            try:
                sentences = ast.literal_eval(row["story"])
                candidates = ast.literal_eval(row.get("cands") or "[]")
                question, answer = row["question"].strip(), row["answer"].strip()
            except (KeyError, ValueError, SyntaxError, AttributeError) as exc:
                raise InputError(f"{path}:{number} is not a Percept-ToMi row ({type(exc).__name__}: {exc})",
                                 "pass dataset/Percept-ToMi.csv from chanijung/PercepToM") from exc
            story = "\n".join(s.strip().rstrip(".") + "." for s in sentences if str(s).strip())
            raw = row.get("qTypeRaw") or _tomi_type_from_question(question)
            items.append(TomItem(id=f"{benchmark}-percept-{row.get('index') or number}", story=story,
                                 question=question, answer=answer,
                                 qtype=row.get("qType") or coarse_tomi_type(raw), benchmark=benchmark,
                                 kind="location", meta={"question_type": raw, "candidates": candidates,
                                                        "source_index": row.get("index"), "source_line": number}))
    return items


# ---- Hi-ToM ---------------------------------------------------------------------------------
_CHOICE_RE = re.compile(r"(?:^|,\s*)([A-Z])\.\s*")


def parse_choices(raw: str) -> dict[str, str]:
    """Split Hi-ToM's ``"A. green_bottle, B. red_basket"`` into ``{"A": "green_bottle", ...}``."""
    parts = _CHOICE_RE.split(raw.strip())
    # split() yields ["", "A", "green_bottle", "B", "red_basket", ...]
    return {parts[i]: parts[i + 1].strip().rstrip(",").strip() for i in range(1, len(parts) - 1, 2)}


def load_hitom(path: str | Path, prompting_type: str | None = "CoTP") -> list[TomItem]:
    """Read Hi-ToM's JSON; keep one prompting type (the paper uses ``CoTP``; None keeps all)."""
    data = _read_json(Path(path))
    rows = data.get("data", data) if isinstance(data, dict) else data
    items = []
    for index, row in enumerate(rows):
        if prompting_type and row.get("prompting_type") not in (None, prompting_type):
            continue
        options = parse_choices(row.get("choices", ""))
        letter = next((k for k, v in options.items() if v == row["answer"]), None)
        order = row.get("question_order")
        items.append(TomItem(
            id=f"hitom-{index:05d}", story=str(row["story"]).strip(),
            question=_hitom_question(row["question"], options),
            answer=row["answer"], qtype=f"order_{order}", benchmark="hitom", kind="choice", options=options,
            answer_letter=letter, meta={**{k: row.get(k) for k in ("deception", "story_length", "question_order",
                                                                   "sample_id", "prompting_type")},
                                        "source_index": index}))
    return items


def _hitom_question(question: str, options: dict[str, str]) -> str:
    listed = ", ".join(f"{k}. {v}" for k, v in options.items())
    return f"{question.strip()}\nChoose one of: {listed}" if options and "Choose" not in question else question


# ---- MMToM-QA -------------------------------------------------------------------------------
_OPTION_RE = re.compile(r"\(([ab])\)\s*(.*?)(?=\s*\([ab]\)\s|\s*Please respond|$)", re.S)


def load_mmtom(path: str | Path) -> list[TomItem]:
    """Read MMToM-QA's text questions (JSON Lines or a JSON list); options are a and b."""
    path = Path(path)
    text = read_text_file(path).lstrip()
    rows = _read_json(path) if text.startswith("[") else _read_jsonl(path)
    items = []
    for index, row in enumerate(rows):
        story, sep, question = str(row["question"]).partition("\nQuestion: ")
        if not sep:
            raise InputError(f"{path} row {index} has no '\\nQuestion: ' separator",
                             "is this MMToM-QA's questions.json?")
        items.append(_mmtom_item(f"mmtom-{index:05d}", story.strip(), question.strip(), row, row.get("question_type")))
    return items


def _mmtom_item(item_id: str, story: str, question: str, row: dict[str, Any], qtype: object) -> TomItem:
    options = {m[1]: m[2].strip() for m in _OPTION_RE.finditer(question)}
    answer_letter = str(row["answer"]).strip().lower()
    return TomItem(id=item_id, story=story, question=question, answer=options.get(answer_letter, answer_letter),
                   qtype=f"type_{qtype}", benchmark="mmtom", kind="choice", options=options,
                   answer_letter=answer_letter,
                   meta={k: row.get(k) for k in ("episode", "start_time", "end_time", "question_type") if k in row})


# ---- FANToM ---------------------------------------------------------------------------------
def load_fantom(path: str | Path, context: str = "short", seed: int = 99,
                target: str | None = None) -> list[TomItem]:
    """Read FANToM's ``fantom_v1.json`` into its question kinds, grouped by ``set_id``.

    Per set: the fact question (token F1), each belief question as FANToM's multiple-choice
    version (the correct and wrong answers as options (a)/(b), order drawn with ``seed``; the
    free-form version needs a sentence embedder and is not run), the answerability and info-
    accessibility list questions and their binary questions. As FANToM's own evaluation does for
    the short context, binary questions whose answer is ``no:long`` are dropped. With the full
    context the answerability and info-accessibility questions are relabelled as FANToM's
    ``setup_fantom`` does (`full_context_access`). ``target`` keeps only ``inaccessible`` or
    ``accessible`` questions (None keeps both).
    """
    data = _read_json(Path(path))
    rows = data.to_dict("records") if hasattr(data, "to_dict") else data
    if isinstance(rows, dict):
        rows = rows.get("data", list(rows.values()))
    rng = random.Random(seed)
    return [item for set_index, row in enumerate(rows) for item in _fantom_set(row, set_index, context, rng, target)]


def _fantom_set(row: dict[str, Any], set_index: int, context: str, rng: random.Random,
                target: str | None) -> list[TomItem]:
    """One FANToM set's items (`load_fantom`): fact, belief (multiple choice, order drawn from ``rng``), list and
    binary questions."""
    items: list[TomItem] = []
    set_id = str(row.get("set_id", set_index))
    story = str(row.get(f"{context}_context") or row.get("short_context") or "").strip()
    relabel = full_context_access(row) if context == "full" else {}

    def add(kind: str, qa: dict[str, Any], suffix: str, question: str | None = None, **extra: Any) -> None:
        access = relabel.get(id(qa), qa.get("missed_info_accessibility"))
        if target and kind != "fantom_fact" and access != target:
            return
        items.append(TomItem(
            id=f"fantom-{set_id}-{suffix}", story=story, question=question or str(qa["question"]),
            answer=extra.pop("answer", qa.get("correct_answer")), wrong_answer=qa.get("wrong_answer"),
            qtype=extra.pop("qtype", str(qa.get("question_type", kind))), benchmark="fantom", kind=kind,
            group=set_id, meta={"missed_info_accessibility": access, "tom_type": qa.get("tom_type")}, **extra))

    fact = row.get("factQA")
    if fact:
        add("fantom_fact", fact, "fact", qtype="fact")
    for i, qa in enumerate(row.get("beliefQAs") or []):
        wrong, right = str(qa["wrong_answer"]), str(qa["correct_answer"])
        options = {"a": wrong, "b": right} if rng.choice([True, False]) else {"a": right, "b": wrong}
        letter = next(k for k, v in options.items() if v == right)
        question = (f"{qa['question']}\n(a) {options['a']}\n(b) {options['b']}\n\nChoose an answer from above:")
        add("fantom_belief_mc", qa, f"belief{i}", question=question, options=options, answer_letter=letter,
            answer=right, qtype=f"{qa.get('question_type', 'tom:belief')}:multiple-choice")
    fact_q = (fact or {}).get("question", "")
    fact_a = (fact or {}).get("correct_answer", "")
    for key, label in (("answerabilityQA_list", "answerability_list"),
                       ("infoAccessibilityQA_list", "info_accessibility_list")):
        qa = row.get(key)
        if qa:
            lead = (f"Target: {fact_q}" if key.startswith("answer") else f"Information: {fact_q} {fact_a}")
            add("fantom_list", qa, label, question=f"{lead}\nQuestion: {qa['question']}")
    for key, label in (("answerabilityQAs_binary", "answerability_binary"),
                       ("infoAccessibilityQAs_binary", "info_accessibility_binary")):
        for i, qa in enumerate(row.get(key) or []):
            if context == "short" and qa.get("correct_answer") == "no:long":
                continue
            lead = (f"Target: {fact_q}" if key.startswith("answer") else f"Information: {fact_q} {fact_a}")
            add("fantom_binary", qa, f"{label}{i}",
                question=f"{lead}\nQuestion: {qa['question']} Answer yes or no.")
    return items


def full_context_access(row: dict[str, Any]) -> dict[int, str]:
    """Return FANToM's full-context relabelling of one set's questions, keyed by ``id()`` of each question.

    As ``setup_fantom`` in ``skywalker023/fantom`` ``eval_fantom.py`` (@ 9b41d616) does for
    ``--conversation-input-type full``: a list question with any name in its ``wrong_answer``
    becomes ``inaccessible``; the binary questions of a family all take the first one's label,
    or ``inaccessible`` when any of them is not answered "yes".
    """
    labels: dict[int, str] = {}
    for key in ("answerabilityQA_list", "infoAccessibilityQA_list"):
        qa = row.get(key)
        if qa and len(qa.get("wrong_answer") or []) > 0:
            labels[id(qa)] = "inaccessible"
    for key in ("answerabilityQAs_binary", "infoAccessibilityQAs_binary"):
        family = row.get(key) or []
        if family:
            label = family[0].get("missed_info_accessibility")
            if any(qa.get("correct_answer") != "yes" for qa in family):
                label = "inaccessible"
            labels.update({id(qa): label for qa in family})
    return labels


# ---- the uniform JSONL of ../shared/benchmarks ------------------------------------------------
def load_jsonl(path: str | Path, benchmark: str) -> list[TomItem]:
    """Read the uniform ``{id, story, question, answer, meta}`` JSONL of the shared samples."""
    items = []
    rows = list(jsonl_rows(Path(path), ("id", "story", "question", "answer")))
    refuse_duplicate_ids(((str(row["id"]), f"{path}:{n}") for n, row in rows), "question")
    for _, row in rows:
        meta = row.get("meta") or {}
        if benchmark in ("tomi", "paratomi"):
            raw = meta.get("question_type_coarse") or coarse_tomi_type(meta.get("question_type") or
                                                                      _tomi_type_from_question(row["question"]))
            items.append(TomItem(id=str(row["id"]), story=row["story"], question=row["question"],
                                 answer=row["answer"], qtype=raw, benchmark=benchmark, kind="location", meta=meta))
        elif benchmark == "hitom":
            options = {c["label"]: c["text"] for c in meta.get("choices") or []}
            items.append(TomItem(id=str(row["id"]), story=row["story"],
                                 question=_hitom_question(row["question"], options),
                                 answer=row["answer"], qtype=f"order_{meta.get('question_order')}",
                                 benchmark="hitom", kind="choice", options=options,
                                 answer_letter=meta.get("answer_letter"), meta=meta))
        elif benchmark == "mmtom":
            item = _mmtom_item(str(row["id"]), row["story"], row["question"], {**meta, "answer": row["answer"]},
                               meta.get("question_type"))
            if meta.get("options"):
                item.options = dict(meta["options"])
                item.answer = item.options.get(item.answer_letter or "", item.answer)
            item.meta = meta
            items.append(item)
        else:
            raise InputError(f"the JSONL form has no loader for benchmark {benchmark!r}",
                             "use tomi, paratomi, hitom or mmtom")
    return items


def _tomi_loader(benchmark: str) -> Callable[[Path, LoadOptions], list[TomItem]]:
    def load(path: Path, _options: LoadOptions) -> list[TomItem]:
        if path.suffix == ".jsonl":
            return load_jsonl(path, benchmark)
        return load_percept_tomi(path, benchmark) if path.suffix == ".csv" else load_babi(path, benchmark)
    return load


def _load_hitom(path: Path, _options: LoadOptions) -> list[TomItem]:
    return load_jsonl(path, "hitom") if path.suffix == ".jsonl" else load_hitom(path)


def _load_mmtom(path: Path, _options: LoadOptions) -> list[TomItem]:
    first = read_text_file(path).lstrip()[:2000]
    return load_jsonl(path, "mmtom") if '"story"' in first and '"meta"' in first else load_mmtom(path)


def _load_fantom(path: Path, options: LoadOptions) -> list[TomItem]:
    return load_jsonl(path, "fantom") if path.suffix == ".jsonl" else load_fantom(path, context=options.context)


def _load_confaide(path: Path, options: LoadOptions) -> list[TomItem]:
    return load_confaide(path, samples=options.samples)


# each shipped benchmark's data: licence, where it is public since when, the official scorer's code, and the
# S3AP paper's Table 1 (GPT-4o, CoT -> S3AP, o3 as parser), the reference a run is compared with
_S3AP_TOMI = "XuhuiZhou/social-world-model social_world_model/task_modules/tomi.py @ 0332906d"
_DATA: dict[str, tuple[str, str, str, tuple[float, float] | None]] = {
    "tomi": ("CC BY-NC 4.0 (facebookresearch/ToMi): non-commercial, with attribution", "public on GitHub since 2019",
             _S3AP_TOMI, (0.813, 0.927)),
    "paratomi": ("MIT (skywalker023/thought-tracing), derived from CC BY-NC 4.0 ToMi",
                 "public on GitHub, paraphrasing ToMi (public since 2019)", _S3AP_TOMI, (0.818, 0.905)),
    "hitom": ("Apache-2.0 (ying-hui-he/Hi-ToM_dataset)", "public on GitHub since 2023",
              "XuhuiZhou/social-world-model social_world_model/task_modules/hitom.py @ 1bf92947", (0.660, 0.750)),
    "mmtom": ("MIT (chuanyangjin/MMToM-QA)", "public on GitHub since 2024",
              "XuhuiZhou/social-world-model social_world_model/task_modules/mmtom.py @ 1bf92947", (0.652, 0.692)),
    "fantom": ("the terms of skywalker023/fantom, from which the user downloads it (swm ships none of it)",
               "public since 2023", "skywalker023/fantom eval_fantom.py @ 9b41d616", (0.396, 0.491)),
    "confaide": ("MIT (skywalker023/confAIde)", "public on GitHub since 2023",
                 "skywalker023/confaide eval.py @ dfe977e9", None),
}
for _name, _task, _load in (("tomi", "tomi", _tomi_loader("tomi")), ("paratomi", "tomi", _tomi_loader("paratomi")),
                            ("hitom", "hitom", _load_hitom), ("mmtom", "mmtom", _load_mmtom),
                            ("fantom", "fantom", _load_fantom), ("confaide", "confaide", _load_confaide)):
    _licence, _public, _source, _paper = _DATA[_name]
    register_benchmark(Benchmark(_name, task=_task, load=_load, headline=HEADLINE[_name], variants=VARIANTS[_name],
                                 grouped=_name in ("fantom", "confaide"), folder=_name == "confaide",
                                 licence=_licence, public=_public, source=_source, paper=_paper))


def load_benchmark(benchmark: str, path: str | Path, samples: int = 1, context: str = "short") -> list[TomItem]:
    """Load a benchmark file with its row's loader (`BENCHMARKS`).

    ``samples`` is ConfAIde's answers per prompt (each its own item); ``context`` is FANToM's
    conversation input (``short`` or ``full``); other benchmarks ignore them.
    """
    path = Path(path)
    row = BENCHMARKS.get(benchmark)
    if row is None:
        raise InputError(f"unknown benchmark {benchmark!r}", f"use one of {', '.join(BENCHMARKS)}")
    if not path.is_file() and not (row.folder and path.is_dir()):
        raise InputError(f"no such file: {path}", "pass the benchmark's data file with --data")
    items = row.load(path, LoadOptions(samples=samples, context=context))
    if not items:
        raise InputError(f"{path} holds no {benchmark} questions", "check --benchmark and --data")
    refuse_duplicate_ids(((item.id, f"{path} question {i}") for i, item in enumerate(items, 1)), "question")
    return items


def select(items: list[TomItem], n: int | None, seed: int) -> list[TomItem]:
    """Return ``n`` items drawn with ``seed`` (kept in file order), or all when n is None.

    FANToM is drawn by whole question sets and ConfAIde by whole scenarios (every question type
    and sample of one), so that their set-level and worst-case metrics stay meaningful.
    """
    if n is None or n >= len(items):
        return list(items)
    rng = random.Random(seed)
    row = BENCHMARKS.get(items[0].benchmark) if items else None
    if row is not None and row.grouped:
        groups = list(dict.fromkeys(i.group for i in items))
        chosen: set[str | None] = set()
        count = 0
        for g in rng.sample(groups, len(groups)):
            if count >= n:
                break
            chosen.add(g)
            count += sum(1 for i in items if i.group == g)
        return [i for i in items if i.group in chosen]
    keep = sorted(rng.sample(range(len(items)), n))
    return [items[i] for i in keep]
