"""``python -m bench.faults --served``: faults of a served sampler and of a key quoted back, counted.

Each case runs the real command in a child process against a loopback fake in this one
(`swm.testing.vllm.FakeVllm`: vLLM's runtime-LoRA routes, completions decoded in torch by a tiny
random Llama with the named adapter applied; or `FakeOpenAIServer` for ``swm learn``), and counts:

* ``served-base`` — a server that lists every adapter, plays it at temperature 0 and samples the
  base (`swm selfplay --lora-server`, Werewolf, 2 iterations): rollouts sampled from the base but
  stored as a trained adapter's (*wrong policy*);
* ``probes-base`` — a server that plays the adapter only where a probe looks (temperature 0, one token) and the
  base on every rollout request: the exit code, rollouts kept under a trained adapter's name, and the rerun of the
  same thread once the server is mended (its rollouts lost or duplicated);
* ``unasked-base`` — a server honest only on requests at temperature 0 or asking for log-probs: sampled requests
  the base answered (every rollout request asks for its log-probs);
* ``forgotten-adapter`` — the server restarts mid-run and forgets its adapters (HTTP 404 for the
  name): rollouts lost (failed or missing) and the exit code;
* ``echo-key`` — ``swm learn`` whose endpoint refuses two calls with a message quoting the bearer key
  (``SWM_API_KEY_127_0_0_1``): occurrences of the key on stderr, in the database and under ``--out``;
* ``selfplay-kill`` — ``swm selfplay`` SIGKILLed once two of an iteration's four rollouts are stored,
  then resumed: sampled requests answered twice (*paid twice*). The kill lands in the milliseconds
  between the store's commit of a rollout and the checkpointer's write of its node every time: a
  trigger drops that write (channel ``rolled``), as the kill would.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.extra_graphs import SCRIPTS
from swm.testing import FakeOpenAIServer
from swm.testing.vllm import FakeVllm, TorchLora, wide_tiny_llama

ROOT = Path(__file__).resolve().parents[1]
CLI = "import sys; from swm.cli import main; sys.exit(main(sys.argv[1:]))"
DEADLINE = 600.0  # seconds a wait may last on a loaded machine; each ends on its event long before
ROLLOUTS = "selfplay_rollouts"
KEY = "sk-SEKRET-quoted-back-0123456789"
# a game: a tiny random model earns rewards there, so PPO moves the adapter; at this step size its greedy replies
# stay the base's (what a greedy probe cannot tell apart)
SELFPLAY = ["selfplay", "--game", "werewolf", "--max-rounds", "1", "--iterations", "2", "--tasks", "1", "--group", "2",
            "--eval-tasks", "1", "--kl-coef", "0", "--train-lr", "0.005", "--max-new-tokens", "4", "--train-rank", "4",
            "--thread-id", "F"]
EXPECTED_ROLLOUTS = 6  # 2 iterations × (2 training rollouts + 1 held-out)
LEARN = ["learn", "--cycles", "1", "--levels", "easy", "--families", "negotiation", "--episodes-per-level", "2",
         "--samples-per-task", "2", "--max-turns", "2", "--heldout-per-cell", "1", "--concurrency", "1",
         "--max-retries", "1", "--thread-id", "L"]


@dataclass
class ServedOutcome:
    case: str
    rc: int
    last_line: str
    rollouts: int  # stored
    lost: int  # expected and never stored, or stored as failed
    duplicated: int
    paid_twice: int  # sampled requests answered twice
    wrong_policy: int  # rollouts stored under a trained adapter's name that the base sampled
    keys: int  # occurrences of the key on stderr, in the database and under --out


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def count(db: Path, sql: str) -> int:
    """One number from the run's database, read-only (0 while the table does not exist)."""
    if not db.exists():
        return 0
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return int(conn.execute(sql).fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


def wait(condition: Callable[[], bool], what: str, proc: subprocess.Popen[str]) -> None:
    """Wait until ``condition()`` holds (read from the child's database); fail if the child ended first."""
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if proc.poll() is not None:
            raise RuntimeError(f"the run ended (rc {proc.returncode}) before {what}: "
                               f"{proc.stderr.read()[-2000:] if proc.stderr else ''}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _last(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def _selfplay(fake: FakeVllm, base: Path, folder: Path, more: list[str] | None = None
              ) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-c", CLI, *SELFPLAY, *(more or []), "--base", str(base), "--lora-server",
            fake.server.base_url,
            "--db", str(folder / "run.db"), "--out", str(folder / "out")]
    return subprocess.run(args, env=env(), text=True, capture_output=True, timeout=DEADLINE)


def _rollout_counts(db: Path) -> tuple[int, int, int]:
    """Stored rollouts, those stored failed, and ids stored twice."""
    stored = count(db, f"select count(*) from {ROLLOUTS}")
    failed = count(db, f"select count(*) from {ROLLOUTS} where failed is not null")
    twice = count(db, f"select count(*) - count(distinct rollout_id) from {ROLLOUTS}")
    return stored, failed, twice


def served_base(folder: Path, base: Path) -> ServedOutcome:
    """A server that samples the base where it is not greedy (`FakeVllm` with ``ignore_adapter="sampled"``)."""
    fake = FakeVllm(base, ignore_adapter="sampled", record=False)
    with fake.server:
        done = _selfplay(fake, base, folder)
    db = folder / "run.db"
    stored, failed, twice = _rollout_counts(db)
    # every rollout under checkpoint 1 or later was sampled by the base: the held-out ones and iteration 1's
    wrong = count(db, f"select count(*) from {ROLLOUTS} where phase = 'eval' or iteration > 0")
    return ServedOutcome("served-base", done.returncode, _last(done.stderr), stored, failed, twice, 0, wrong, 0)


# the value head's advantages move the adapter in one iteration at this step size: an adapter that is still the base
# is not a case to catch (the group estimator has no advantage to give two games of equal reward)
MOVING = ["--estimator", "hierarchical", "--train-batch-size", "4", "--train-lr", "0.05"]


def probes_base(folder: Path, base: Path) -> ServedOutcome:
    """A server that plays the adapter only where a probe looks (temperature 0, or one token) and the base on every
    rollout request: its own log-probs of what it sampled give it away (exit 3 before the update, the iteration's
    rollouts let go); the same thread rerun on the mended server plays them again."""
    fake = FakeVllm(base, ignore_adapter="probes", record=False)
    db = folder / "run.db"
    with fake.server:
        first = _selfplay(fake, base, folder, MOVING)
        # every rollout kept under checkpoint 1 or later, sampled while the server lied, is the wrong policy's
        wrong = count(db, f"select count(*) from {ROLLOUTS} where (phase = 'eval' or iteration > 0) "
                          "and failed is null")
        fake.torch.ignore_adapter = False
        second = _selfplay(fake, base, folder, MOVING)
    stored, failed, twice = _rollout_counts(db)
    line = f"{_last(first.stderr)} → rerun on the mended server: exit {second.returncode}"
    lost = failed + max(0, EXPECTED_ROLLOUTS - stored)
    return ServedOutcome("probes-base", first.returncode, line, stored, lost, twice, 0, wrong, 0)


def unasked_base(folder: Path, base: Path) -> ServedOutcome:
    """The round-five server: the adapter on requests at temperature 0 or asking for log-probs, the base on every
    other. Rollout requests ask for the log-probs of what they sample, so it has nowhere to play the base: counted
    as sampled requests the base answered (``wrong_policy``)."""
    fake = FakeVllm(base, ignore_adapter="unasked", record=False)
    with fake.server:
        done = _selfplay(fake, base, folder, MOVING)
    stored, failed, twice = _rollout_counts(folder / "run.db")
    wrong = sum(1 for d in fake.torch.played if d == "")
    lost = failed + max(0, EXPECTED_ROLLOUTS - stored) if done.returncode == 0 else failed
    return ServedOutcome("unasked-base", done.returncode, _last(done.stderr), stored, lost, twice, 0, wrong, 0)


def forgotten_adapter(folder: Path, base: Path) -> ServedOutcome:
    """The server restarts after 20 answered requests (mid iteration 0) and forgets every adapter."""
    fake = FakeVllm(base, record=False)
    with fake.server:
        fake.server.configure(forget_adapters_at=20)
        done = _selfplay(fake, base, folder)
    stored, failed, twice = _rollout_counts(folder / "run.db")
    lost = failed + max(0, EXPECTED_ROLLOUTS - stored) if done.returncode == 0 else failed
    return ServedOutcome("forgotten-adapter", done.returncode, _last(done.stderr), stored, lost, twice, 0, 0, 0)


def echo_key(folder: Path) -> ServedOutcome:
    """``swm learn`` whose endpoint refuses two calls quoting the key it was sent."""
    with FakeOpenAIServer(scripts=SCRIPTS) as server:
        server.configure(faults=["echo_key", "echo_key"], retry_after_ms=1)
        args = [sys.executable, "-c", CLI, *LEARN, "--model", server.model_spec, "--db", str(folder / "run.db"),
                "--out", str(folder / "out")]
        done = subprocess.run(args, env={**env(), "SWM_API_KEY_127_0_0_1": KEY}, text=True, capture_output=True,
                              timeout=DEADLINE)
    keys = done.stderr.count(KEY) + done.stdout.count(KEY)
    keys += sum(p.read_bytes().count(KEY.encode()) for p in folder.rglob("*") if p.is_file())
    # the two refused episodes are recorded failed (exit 3), to be played again by a rerun: none is lost
    return ServedOutcome("echo-key", done.returncode, _last(done.stderr), 0, 0, 0, 0, 0, keys)


class HeldSampler:
    """The fake vLLM's completions, each answered sampled request recorded; once ``hold_after`` rollouts are stored,
    sampled requests wait (never answered), so nothing is half-paid when the run is killed."""

    def __init__(self, base: Path, adapters: Callable[[], dict[str, str]], db: Path) -> None:
        self.torch = TorchLora(base, adapters)
        self.db = db
        self.armed = threading.Event()  # the trigger is in place: sampling may start
        self.hold_after = 2
        self.turns_before_hold = 0  # sampled requests answered once ``hold_after`` are stored: the next one holds
        self.release = threading.Event()
        self.holding = threading.Event()  # a request is held: the run is mid-rollout
        self.answered: list[tuple[int, str]] = []
        self._after = 0

    def __call__(self, prompt: str, body: dict[str, Any]) -> Any:
        # a rollout's request (temperature > 0; it asks for the log-prob of each token it samples, `check_sampled`),
        # not the log-prob check's probes (one token, the top LOGPROB_TOP)
        sampled = bool(body.get("temperature")) and int(body.get("logprobs") or 0) <= 1
        if sampled:
            self.armed.wait(DEADLINE)
            if self.hold_after and count(self.db, f"select count(*) from {ROLLOUTS}") >= self.hold_after:
                self._after += 1
                if self._after > self.turns_before_hold:
                    self.holding.set()
                    self.release.wait(DEADLINE)
                    raise RuntimeError("held until the client was killed: never answered")
        reply = self.torch(prompt, body)
        if sampled:
            self.answered.append((int(body["seed"]), prompt))
        return reply


def selfplay_kill(folder: Path, base: Path, turns_in: int = 0) -> ServedOutcome:
    """SIGKILL ``swm selfplay`` once two of four rollouts are stored (their node's writes dropped), then resume.

    ``turns_in``: the kill lands that many answered turns into the third rollout (0: before its first), whose turns
    a resume must take from the turn journal, not pay again (`swm.selfplay.journal`).
    """
    db = folder / "run.db"
    sampler = HeldSampler(base, lambda: server.adapters(), db)
    sampler.turns_before_hold = turns_in
    server = FakeOpenAIServer(lora=True, scripts={"<completion>": sampler})
    with server:
        args = [sys.executable, "-c", CLI, "selfplay", "--base", str(base), "--lora-server", server.base_url,
                "--family", "mutual_friend", "--level", "two-seat", "--iterations", "1", "--tasks", "1",
                "--group", "4", "--eval-tasks", "0", "--max-new-tokens", "4", "--train-rank", "4", "--concurrency",
                "1", "--db", str(db), "--thread-id", "K", "--out", str(folder / "out")]
        first = subprocess.Popen(args, env=env(), text=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait(lambda: count(db, "select count(*) from sqlite_master where name = 'writes'") > 0,
                 "the checkpointer's tables", first)
            with sqlite3.connect(db, timeout=60) as conn:
                conn.execute("create trigger lose_rolled before insert on writes when new.channel = 'rolled' "
                             "begin select raise(ignore); end")
            sampler.armed.set()
            wait(lambda: count(db, f"select count(*) from {ROLLOUTS}") >= 2, "two stored rollouts", first)
            wait(sampler.holding.is_set, "a held request", first)
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=60)
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
            sampler.armed.set()
        with sqlite3.connect(db, timeout=60) as conn:
            conn.execute("drop trigger lose_rolled")
        sampler.hold_after = 0
        sampler.release.set()
        second = subprocess.run(args, env=env(), text=True, capture_output=True, timeout=DEADLINE)
    stored, failed, twice = _rollout_counts(db)
    paid_twice = sum(n - 1 for n in Counter(sampler.answered).values() if n > 1)
    case = "selfplay-kill" + (f"-{turns_in}-turns-in" if turns_in else "")
    return ServedOutcome(case, second.returncode, _last(second.stderr), stored,
                         failed + max(0, 4 - stored), twice, paid_twice, 0, 0)


CASES: dict[str, Callable[[Path, Path], ServedOutcome]] = {
    "served-base": served_base, "probes-base": probes_base, "unasked-base": unasked_base,
    "forgotten-adapter": forgotten_adapter,
    "echo-key": lambda folder, base: echo_key(folder), "selfplay-kill": selfplay_kill,
    "selfplay-kill-mid-rollout": lambda folder, base: selfplay_kill(folder, base, turns_in=1)}


def run_served(cases: list[str]) -> list[ServedOutcome]:
    """Run each named case in a fresh folder, on one tiny model."""
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="swm-served-faults-") as tmp:
        base = wide_tiny_llama(Path(tmp) / "model")
        for name in cases:
            folder = Path(tmp) / name
            folder.mkdir()
            outcomes.append(CASES[name](folder, base))
    return outcomes


def served_markdown(outcomes: list[ServedOutcome]) -> str:
    lines = ["| case | exit | last line on stderr | rollouts stored | lost | duplicated | paid twice | "
             "sampled by the wrong policy | keys written |", "|---|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        shown = o.last_line.replace("|", "\\|")
        lines.append(f"| {o.case} | {o.rc} | `{shown}` | {o.rollouts} | {o.lost} | {o.duplicated} | "
                     f"{o.paid_twice} | {o.wrong_policy} | {o.keys} |")
    return "\n".join(lines) + "\n"
