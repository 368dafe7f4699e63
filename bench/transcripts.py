"""What the one model learned, read from the test transcripts of `bench.two_seat` evaluations (multi-turn levels).

    python -m bench.transcripts ~/swm-runs/h4d/rl-s0/two-seat.json:warm ~/swm-runs/h4d/rl-s0/two-seat.json:selfplay

Each ``JSON:ARM`` names one policy's evaluation (the bench's ``eval`` record: per test task its transcript and
verdict). The test tasks are rebuilt as the bench built them (`swm.tasks.splits.split_tasks` is seeded), so each seat's
own list, the shared friend and the seats' names are the task's truth, and every message is read with the checker's
own name reading (`swm.tasks.multi_turn.people_named`), so a name counts however it is spelled. Per policy, over both
seats' answers and lists: answers right; answers copying the prompt's ``First Last`` placeholder; answers naming a
seat (one of the two speakers); answers naming another friend of the seat's own list; answers with nothing after
``ANSWER:``; answers the attempt credit pays (the checker's ``detail["attempted"]``: one person of the lists,
unhedged, right or wrong); listed names not on the seat's
own list (copied from the partner), per role; lists that name the friend. Then each later policy against the first,
task by task: exact McNemar on joint success. The results page's transcript table is this output.

    python -m bench.transcripts --training ~/swm-runs/h4a/rl-s1/bench.sqlite

reads a run's *training* rollouts instead (the bench's store, every run in it), iteration by iteration: rollouts,
joint successes, and over both seats' first answers those right, empty and paid by the attempt credit (the
checker's ``detail``, as the rewards read it): the drift to answering nothing shows there first.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from swm.checkpoints import ExperienceStore
from swm.selfplay.store import ROLLOUTS, load_rollouts
from swm.stats import mcnemar_exact, wilson_interval
from swm.tasks.checkers import Utterance
from swm.tasks.families import Task
from swm.tasks.multi_turn import people_named
from swm.tasks.splits import split_tasks
from swm.tasks.verify import check

PLACEHOLDER = "first last"


def load_eval(spec: str) -> list[dict[str, Any]]:
    """Return the evaluation rows named by ``JSON:ARM``."""
    source, _, arm = spec.rpartition(":")
    return list(json.loads(Path(source).expanduser().read_text())["eval"][arm])


def test_tasks(rows: list[dict[str, Any]], names: str = "disjoint") -> dict[str, Task]:
    """The test tasks the rows were played on, rebuilt as the bench built them (`split_tasks`, seeded), by id."""
    level, family = rows[0]["task"].split(":")[2], rows[0]["task"].split(":")[1]
    tasks = {t.task_id: t for t in split_tasks("test", [level], [family], len(rows), names=names)}
    missing = [r["task"] for r in rows if r["task"] not in tasks]
    if missing:
        raise ValueError(f"{len(missing)} evaluated tasks are not the test split's (first {missing[0]}): another "
                         "name policy (--names), or the generator changed since the evaluation")
    return tasks


def read(rows: list[dict[str, Any]], names: str = "disjoint") -> Counter[str]:
    """Count what each seat answered and listed over one policy's evaluation rows."""
    counts: Counter[str] = Counter()
    tasks = test_tasks(rows, names)
    for row in rows:
        task = tasks[row["task"]]
        truth = task.truth
        seats, lists = truth["seats"], truth["lists"]
        friend = " ".join(truth["friend"].split()).casefold()
        counts["tasks"] += 1
        counts["passed"] += int(row["passed"])
        answered: set[str] = set()
        attempted = check(task, [Utterance(agent=a, text=t) for a, t in row["transcript"]]).detail["attempted"]
        counts["answers the attempt credit pays"] += sum(bool(v) for v in attempted.values())
        for speaker, text in row["transcript"]:
            i = seats.index(speaker)
            own = {" ".join(n.split()).casefold() for n in lists[i]}
            named = people_named(text, task)
            if "ANSWER:" in text and speaker not in answered:
                answered.add(speaker)
                line = text.split("ANSWER:", 1)[1].partition("\n")[0].strip().casefold()
                said = named or set()
                counts["answers"] += 1
                counts["answers right"] += int(friend in said and len(said) == 1)
                counts["answers copying the placeholder"] += int(PLACEHOLDER in line)
                counts["answers naming a seat"] += int(any(s.casefold() in line for s in seats))
                counts["answers naming another friend of the seat's own list"] += int(bool(said & own - {friend}))
                counts["answers with nothing after ANSWER:"] += int(not line)
                continue
            if "ANSWER:" in text:
                continue
            role = "opener" if i == 0 else "responder"
            counts["lists"] += 1
            counts["lists naming the friend"] += int(friend in named)
            counts[f"names listed ({role})"] += len(named)
            counts[f"listed names not on the seat's own list ({role})"] += len(named - own)
    return counts


def report(specs: list[str], names: str = "disjoint") -> str:
    """The side-by-side table of the policies' counts, then each later policy against the first (McNemar)."""
    evals = [load_eval(s) for s in specs]
    counts = [read(rows, names) for rows in evals]
    keys = list(dict.fromkeys(k for c in counts for k in c))
    lines = ["| | " + " | ".join(specs) + " |", "|---|" + "---|" * len(specs)]
    lines += [f"| {k} | " + " | ".join(str(c[k]) for c in counts) + " |" for k in keys]
    lines.append("")
    first = {r["task"]: bool(r["passed"]) for r in evals[0]}
    for spec, rows in zip(specs[1:], evals[1:], strict=True):
        other = {r["task"]: bool(r["passed"]) for r in rows}
        shared = sorted(first.keys() & other.keys())
        b, c, p = mcnemar_exact([first[t] for t in shared], [other[t] for t in shared])
        k = sum(other[t] for t in shared)
        low, high = wilson_interval(k, len(shared))
        lines.append(f"- {spec}: {k}/{len(shared)} [{low:.3f}, {high:.3f}]; against {specs[0]} on the same "
                     f"{len(shared)} tasks: {b} lost, {c} gained, exact McNemar p = {p:.2g}")
    return "\n".join(lines) + "\n"


def training(db: Path) -> str:
    """Per run and iteration of a store's training rollouts: joint success and what the seats' first answers were."""
    store = ExperienceStore(db)
    lines = ["| run | iteration | rollouts | joint successes | answers | right | empty | attempted |",
             "|---|---|---|---|---|---|---|---|"]
    runs = store.rows(f"select distinct run_id, iteration from {ROLLOUTS} where phase = 'train' "
                      "order by run_id, iteration") if store.has_table(ROLLOUTS) else []
    for row in runs:
        rollouts = [r for r in load_rollouts(store, row["run_id"], row["iteration"], "train") if not r.failed]
        c: Counter[str] = Counter()
        for r in rollouts:
            verdict: dict[str, Any] = r.verdict or {}
            detail: dict[str, Any] = verdict.get("detail") or {}
            right: dict[str, bool] = detail.get("right") or {}
            c["passed"] += int(bool(verdict.get("completion")))
            c["answers"] += len(right)
            c["right"] += sum(bool(v) for v in right.values())
            c["attempted"] += sum(bool(v) for v in (detail.get("attempted") or {}).values())
            c["empty"] += sum(1 for _, text in r.transcript()
                              if "ANSWER:" in text and not text.split("ANSWER:", 1)[1].partition("\n")[0].strip())
        lines.append(f"| {row['run_id']} | {row['iteration']} | {len(rollouts)} | {c['passed']} | {c['answers']} | "
                     f"{c['right']} | {c['empty']} | {c['attempted']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("evals", nargs="*", metavar="JSON:ARM", help="a bench.two_seat two-seat.json and an eval arm")
    ap.add_argument("--names", default="disjoint", help="the runs' name policy (bench.two_seat --names)")
    ap.add_argument("--training", type=Path, metavar="DB", help="a bench.two_seat bench.sqlite: its training rollouts")
    args = ap.parse_args()
    if args.training is not None:
        print(training(args.training.expanduser()))
    if args.evals:
        print(report(args.evals, args.names))
    elif args.training is None:
        ap.error("name evaluations (JSON:ARM) or --training DB")


if __name__ == "__main__":
    main()
