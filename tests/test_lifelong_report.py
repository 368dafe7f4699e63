"""The lifelong report's policy listing: the spec each policy was served as, its adapter and training run."""

from __future__ import annotations

from pathlib import Path

from lifelong_helpers import negotiation_task, record

from swm.checkpoints import ExperienceStore
from swm.lifelong import store as ls
from swm.lifelong.plan import LifelongPlan
from swm.lifelong.report import policy_listing, write_report
from swm.lifelong.update import PolicyVersion, TrainStats


def test_each_policy_names_the_spec_it_was_served_as_and_its_adapter(tmp_path: Path) -> None:
    store = ExperienceStore(":memory:")
    ls.put_policy(store, "r", PolicyVersion(version="p0"))
    trained = PolicyVersion(version="p1", parent="p0", kind="dpo", cycle=1, adapter="/runs/r/p1-adapter",
                     adapter_gguf="/runs/r/p1.gguf", served_as="embedded:lora=/runs/r/p1.gguf",
                     train=TrainStats(method="dpo", steps=6, loss=[0.69, 0.41], seconds=12.0, tokens_per_s=310.0))
    ls.put_policy(store, "r", trained)
    ls.put_policy(store, "r", PolicyVersion(version="p2", parent="p1", kind="memory", cycle=2))
    task = negotiation_task()
    for version, spec in (("p0", "qwen@http://gpu:8000/v1"), ("p1", "embedded:lora=/runs/r/p1.gguf")):
        ep = record(task, [("a", "hi")], f"r/test/{version}/x").model_copy(
            update={"run_id": "r", "phase": "test", "policy_version": version, "models": {"agent": spec}})
        ls.put_episode(store, ep, passed=False)
    listed = {p["version"]: p for p in policy_listing(store, "r", agent_spec="the-run's-model")}
    # its own record first, else what its episodes recorded, else the run's agent model
    assert listed["p1"]["served_as"] == "embedded:lora=/runs/r/p1.gguf"
    assert listed["p0"]["served_as"] == "qwen@http://gpu:8000/v1"
    assert listed["p2"]["served_as"] == "the-run's-model"
    assert (listed["p1"]["kind"], listed["p1"]["adapter"], listed["p1"]["adapter_gguf"]) == (
        "dpo", "/runs/r/p1-adapter", "/runs/r/p1.gguf")
    assert listed["p1"]["train"]["steps"] == 6 and listed["p0"]["adapter"] is None
    plan = LifelongPlan(run_id="r", cycles=2, out_dir=str(tmp_path))
    report = write_report(store, plan, agent_spec="the-run's-model").read_text()
    row = next(line for line in report.splitlines() if line.startswith("| p1 |"))
    assert "`embedded:lora=/runs/r/p1.gguf`" in row and "/runs/r/p1-adapter" in row
    assert "dpo: 6 steps, loss 0.690→0.410, 12 s, 310 tok/s" in row
