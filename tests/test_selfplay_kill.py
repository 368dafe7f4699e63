"""Self-play killed with SIGKILL mid-iteration, resumed: a rollout already stored is never sampled (paid) again.

Through `bench.served_faults.selfplay_kill`: `swm selfplay` in a child process against a loopback fake of vLLM in
this one, which records every sampled request it answers (each has its own seed: the run's seed, the rollout, the
turn). The child is SIGKILLed once the store holds two of the iteration's four rollouts (waiting on that row count);
the resumed run must sample only the other two. A kill lands between the store's commit of a rollout and the
checkpointer's write of its node only in a window of milliseconds; a trigger drops that write, so this kill lands
there every time. Costs two child processes (about 35 s of CPU): the real kill is the point.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")
from bench.served_faults import selfplay_kill  # noqa: E402
from swm.testing.vllm import wide_tiny_llama  # noqa: E402


def test_a_killed_selfplay_run_never_samples_a_stored_rollout_again(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    outcome = selfplay_kill(tmp_path / "run", wide_tiny_llama(tmp_path / "model"))
    assert outcome.rc == 0, outcome.last_line
    assert outcome.rollouts == 4 and outcome.lost == 0 and outcome.duplicated == 0
    assert outcome.paid_twice == 0, f"{outcome.paid_twice} sampled request(s) of stored rollouts were paid twice"


def test_a_rollout_killed_mid_way_takes_its_answered_turns_from_the_journal(tmp_path: Path) -> None:
    """Killed one answered turn into the third rollout: the resume replays that turn from the turn journal (paid
    once), samples the rest, and the stored rollout says one turn was replayed; the journal is empty at the end."""
    import sqlite3

    (tmp_path / "run").mkdir()
    outcome = selfplay_kill(tmp_path / "run", wide_tiny_llama(tmp_path / "model"), turns_in=1)
    assert outcome.rc == 0, outcome.last_line
    assert outcome.rollouts == 4 and outcome.lost == 0 and outcome.duplicated == 0
    assert outcome.paid_twice == 0, f"{outcome.paid_twice} sampled request(s) were paid twice"
    with sqlite3.connect(tmp_path / "run" / "run.db") as conn:
        replayed = [r for (r,) in conn.execute("select json_extract(rollout, '$.journal_turns') from "
                                               "selfplay_rollouts order by rollout_id")]
        left = conn.execute("select count(*) from selfplay_turn_journal").fetchone()[0]
    assert sorted(replayed) == [0, 0, 0, 1] and left == 0
