"""SOTOPIA: the shared sample's loader, SOTOPIA's own profile exports, and `swm bench sotopia`."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_episode_scripts import model

from swm.cli import main
from swm.errors import InputError
from swm.scenarios import load_jsonl, load_sotopia_profiles, resolve, shipped
from swm.social.bench import spread
from swm.stats import mean_ci, t95


def test_shared_sotopia_sample_loads(shared_dir: Path) -> None:
    scenarios = load_jsonl(shared_dir / "benchmarks" / "sotopia" / "sotopia_scenarios.jsonl")
    assert len(scenarios) == 146
    hard = [s for s in scenarios if s.hard]
    assert len(hard) == 70 and len({s.meta["env_id"] for s in hard}) == 14
    for s in scenarios:
        assert len(s.agents) == 2 and all(a.goal and a.profile.first_name for a in s.agents)
        assert s.relationship and s.codename
    first = scenarios[0]
    assert first.id == "sotopia-01H7ZDX15NYXZBXS9RT89V2J9P" and first.codename == "game_winning"
    assert first.agents[0].secret.startswith("Part of a rebellious punk rock band")


def test_backgrounds_from_the_shared_sample_keep_the_other_side_private(shared_dir: Path) -> None:
    for s in load_jsonl(shared_dir / "benchmarks" / "sotopia" / "sotopia_scenarios.jsonl"):
        a, b = s.agents
        text = s.background_for(a.name)
        assert a.goal in text
        if b.goal != a.goal:  # some scenarios give both seats the same goal
            assert b.goal not in text
        if b.secret != a.secret:
            assert b.secret not in text


def test_hard_selection_spreads_over_environments(shared_dir: Path) -> None:
    hard = [s for s in load_jsonl(shared_dir / "benchmarks" / "sotopia" / "sotopia_scenarios.jsonl") if s.hard]
    picked = spread(hard, 14)
    assert len({s.meta["env_id"] for s in picked}) == 14
    assert spread(hard, None) and len(spread(hard, None)) == 70


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_sotopia_profile_exports(tmp_path: Path) -> None:
    envs = _write(tmp_path / "environment_profiles.jsonl", [
        {"pk": "ENV1", "codename": "borrow_money", "source": "hand-written", "scenario": "Two friends at a cafe.",
         "agent_goals": ["Borrow $100 <extra_info>rent is due</extra_info>", "Keep your savings"],
         "relationship": 3, "age_constraint": "[(18, 70), (18, 70)]", "occupation_constraint": "nan",
         "agent_constraint": None}])
    agents = _write(tmp_path / "agent_profiles.jsonl", [
        {"pk": "AG1", "first_name": "Ana", "last_name": "Silva", "age": 31, "occupation": "Baker", "gender": "Woman",
         "gender_pronoun": "She/her", "public_info": "Bakes bread.", "big_five": "Openness - High",
         "moral_values": ["Care/Harm"], "schwartz_personal_values": ["Benevolence"],
         "personality_and_values": "Kind.", "decision_making_style": "Intuitive", "secret": "Owes money",
         "model_id": "", "mbti": "ENFP"},
        {"pk": "AG2", "first_name": "Ben", "last_name": "Cole", "age": "45", "occupation": "Pilot", "gender": "Man",
         "gender_pronoun": "He/him", "public_info": "Flies often.", "moral_values": "Fairness/Cheating",
         "secret": "Afraid of heights", "mbti": "ISTJ"}])
    combos = _write(tmp_path / "env_agent_combo_storages.jsonl",
                    [{"pk": "C1", "env_id": "ENV1", "agent_ids": ["AG2", "AG1"]}])
    (s,) = load_sotopia_profiles(envs, agents, combos)
    assert s.id == "sotopia-C1" and s.relationship == "friend" and s.codename == "borrow_money"
    assert s.names == ["Ben Cole", "Ana Silva"]
    assert s.agents[0].goal == "Borrow $100 <extra_info>rent is due</extra_info>"
    assert s.agents[0].profile.age == 45 and s.agents[0].profile.moral_values == ["Fairness/Cheating"]
    assert s.agents[1].secret == "Owes money" and s.meta["env_id"] == "ENV1"
    (default,) = load_sotopia_profiles(envs, agents)
    assert default.names == ["Ana Silva", "Ben Cole"]
    bad = _write(tmp_path / "bad.jsonl", [{"pk": "C2", "env_id": "ENV1", "agent_ids": ["AG1"]}])
    with pytest.raises(InputError):
        load_sotopia_profiles(envs, agents, bad)


def test_shipped_scenarios_and_resolve(tmp_path: Path) -> None:
    ids = [s.id for s in shipped()]
    assert 4 <= len(ids) <= 6 and len(set(ids)) == len(ids)
    assert any(len(s.agents) > 2 for s in shipped())
    assert resolve("swm-bike-sale").id == "swm-bike-sale"
    path = _write(tmp_path / "one.jsonl", [shipped()[1].model_dump(mode="json")])
    assert resolve(str(path)).id == shipped()[1].id
    with pytest.raises(InputError):
        resolve("no-such-scenario")


@pytest.mark.parametrize("typed, meant", [
    ("swm-bike-sael", "swm-bike-sale"), ("SWM-Late-Project", "swm-late-project"),
    ("sotopia-01H7ZDX16BVMWC5R17M1TPA4WX", "sotopia-01H7ZDX16BVMWC5R17M1TPA4WY")])
def test_a_misspelt_scenario_id_is_refused_with_the_id_it_is_close_to(typed: str, meant: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["play", "--scenario", typed, "--no-judge", "--db", str(tmp_path / "p.db")],
                                obj={"llm": model()})
    assert result.exit_code != 0 and f"no scenario {typed!r} (did you mean {meant!r}?)" in result.output, \
        result.output
    unknown = CliRunner().invoke(main, ["play", "--scenario", "nothing-like-it", "--db", str(tmp_path / "p.db")],
                                 obj={"llm": model()})
    assert "no scenario 'nothing-like-it' —" in unknown.output and "did you mean" not in unknown.output


def test_mean_ci() -> None:
    assert mean_ci([]) == (None, None, 0)
    assert mean_ci([3, None]) == (3.0, None, 1)
    mean, half, n = mean_ci([2, 4, 6])
    assert (mean, n) == (4.0, 3) and half == pytest.approx(t95(2) * 2 / math.sqrt(3))
    assert t95(100) == pytest.approx(1.984, abs=1e-3)  # Student t, not the normal 1.96


def test_bench_sotopia_writes_its_table_and_resumes(tmp_path: Path) -> None:
    llm = model()
    out = tmp_path / "out"
    args = ["bench", "sotopia", "--data", "shipped", "--policies", "plain,foresee", "--n", "2", "--max-turns", "3",
            "--seats", "first", "--concurrency", "2", "--db", str(tmp_path / "b.db"), "--thread-id", "R",
            "--out", str(out), "--no-progress"]
    first = CliRunner().invoke(main, args, obj={"llm": llm})
    assert first.exit_code == 0, first.output
    # plain: 3 turns × 1 call; foresee: seat 1 plays 2 turns × 3 + seat 2 one turn × 1; judge: 1 call each
    # (sotopia's protocol judges both agents at once).
    assert llm.calls == 2 * (3 + 1) + 2 * (2 * 3 + 1 + 1)
    table = (out / "sotopia.md").read_text()
    assert "| plain | all | 2 |" in table and "| foresee | all | 2 |" in table and "goal" in table and "± " in table
    data = json.loads((out / "sotopia.json").read_text())
    rows = {r["policy"]: r for r in data["table"] if r["group"] == "all"}
    assert rows["plain"]["calls_per_turn"] == pytest.approx(1.0)
    assert rows["foresee"]["calls_per_turn"] == pytest.approx(7 / 3)
    assert rows["foresee"]["agent_calls_per_turn"] == pytest.approx(3.0)
    assert rows["plain"]["goal"]["n"] == 2 and rows["plain"]["episodes_per_hour"] > 0
    assert len((out / "episodes.jsonl").read_text().splitlines()) == 4
    assert len(list((out / "transcripts").glob("*.txt"))) == 4
    calls = llm.calls
    second = CliRunner().invoke(main, args, obj={"llm": llm})
    assert second.exit_code == 0 and llm.calls == calls and "skipped 4 finished" in second.output
    changed = CliRunner().invoke(main, [*args, "--max-turns", "5", "--partner-policy", "foresee"], obj={"llm": llm})
    assert changed.exit_code == 2 and llm.calls == calls
    assert "error: run R was started with other options (partner_policy: 'plain' → 'foresee'; max_turns: 3 → 5)" \
        in changed.output, changed.output


def test_bench_sotopia_acts_in_the_order_asked_records_it_and_keeps_it_on_resume(tmp_path: Path) -> None:
    llm = model()
    out = tmp_path / "out"
    args = ["bench", "sotopia", "--data", "shipped", "--policies", "plain", "--n", "1", "--max-turns", "4",
            "--seats", "first", "--db", str(tmp_path / "b.db"), "--thread-id", "P", "--out", str(out), "--no-progress"]
    first = CliRunner().invoke(main, [*args, "--act-order", "prefix"], obj={"llm": llm})
    assert first.exit_code == 0, first.output
    acts = [p for _, p in llm.prompts if '<data name="your name">' in p]
    assert len(acts) == 4 and all(p.rstrip().endswith("Act now.") for p in acts), "the conversation, then the turn"
    assert all(p.index("Your available action types") < p.index('<data name="conversation">') for p in acts)
    assert json.loads((out / "sotopia.json").read_text())["meta"]["act_order"] == "prefix"
    assert "acting prompt order: prefix" in (out / "sotopia.md").read_text()
    calls = llm.calls
    again = CliRunner().invoke(main, args, obj={"llm": llm})  # left at its default: the run's recorded order
    assert again.exit_code == 0 and llm.calls == calls, again.output
    assert "run P goes on with its recorded act_order prefix" in again.output
    assert "acting prompt order: prefix" in again.output
    other = CliRunner().invoke(main, [*args, "--act-order", "sotopia"], obj={"llm": llm})  # a contradiction
    assert other.exit_code == 2 and llm.calls == calls
    assert "act_order: 'prefix' → 'sotopia'" in other.output, other.output


def test_bench_sotopia_reports_a_failed_episode_and_finishes_it_on_rerun(tmp_path: Path) -> None:
    from test_episode_resume import crashing_model

    llm = crashing_model(at=2)  # the first episode's second call
    args = ["bench", "sotopia", "--data", "shipped", "--policies", "plain", "--n", "2", "--max-turns", "2",
            "--seats", "first", "--concurrency", "1", "--db", str(tmp_path / "b.db"), "--thread-id", "F",
            "--out", str(tmp_path / "o"), "--no-progress"]
    first = CliRunner().invoke(main, args, obj={"llm": llm})
    assert first.exit_code == 3, first.output
    assert "failed (Crash: killed)" in first.output and "ran 1, skipped 0 finished, failed 1" in first.output
    calls = llm.calls  # 2 (one crashed) + the other episode's 2 turns and its judge call
    assert calls == 2 + 3
    second = CliRunner().invoke(main, args, obj={"llm": llm})
    assert second.exit_code == 0 and "ran 1, skipped 1 finished, failed 0" in second.output
    assert llm.calls == calls + 1 + 1  # only the crashed turn again, then the judge; turn 0 was not replayed


# the judge's goal score for each shipped agent it rates (the first four shipped scenarios)
GOAL_BY_AGENT = {"Nora Lindqvist": 9, "Omar Haddad": 1, "Priya Nair": 6, "Tom Becker": 4, "Helen Okafor": 6,
                 "Jake Moreno": 4, "Sam Whitaker": 7, "Aiko Tanaka": 7}


def test_bench_sotopia_tests_both_seats_and_splits_by_side_and_setting(tmp_path: Path) -> None:
    """Four shipped scenarios (bike sale: competitive; late project, noisy neighbour: mixed; mutual friend:
    cooperative), each played with each side tested, judged by a separate model; per-side and per-setting
    goal means checked by hand from GOAL_BY_AGENT."""
    from test_episode_scripts import env_response, seats_of

    from swm.testing import ScriptedChatModel

    def judge(prompt: str, tool: str | None) -> Any:  # sotopia's protocol: one call rates both agents
        seats = seats_of(prompt)  # sotopia's "Participants: A and B", in the order of the evaluations
        assert tool == "EnvResponse" and len(seats) == 2
        return env_response(2, **{f"agent_{i}_goal": GOAL_BY_AGENT[name] for i, name in enumerate(seats, 1)})

    llm, judge_llm = model(), ScriptedChatModel(respond=judge)
    out = tmp_path / "out"
    args = ["bench", "sotopia", "--data", "shipped", "--policies", "plain", "--n", "4", "--max-turns", "1",
            "--concurrency", "1", "--db", str(tmp_path / "s.db"), "--thread-id", "S", "--out", str(out),
            "--no-progress"]
    result = CliRunner().invoke(main, args, obj={"llm": llm, "chat_models": {"judge": judge_llm}})
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output and "Self-judged" not in result.output
    assert llm.calls == 8 and judge_llm.calls == 8  # 8 episodes x (1 turn; 1 judge call for both agents)
    assert "judge protocol: sotopia" in result.output
    data = json.loads((out / "sotopia.json").read_text())
    assert data["meta"]["judge_protocol"] == "sotopia" and all(r["unscored"] == 0 for r in data["table"])
    assert data["meta"]["self_judged"] is False and data["meta"]["seats"] == "both"
    assert data["meta"]["settings"] == {"swm-bike-sale": "competitive", "swm-late-project": "mixed",
                                        "swm-noisy-neighbour": "mixed", "swm-mutual-friend": "cooperative"}
    goal = {r["group"]: (r["n"], r["goal"]["mean"]) for r in data["table"]}
    assert goal["all"] == (8, pytest.approx(5.5))
    assert goal["seat 1"] == (4, pytest.approx((9 + 6 + 6 + 7) / 4))    # Nora, Priya, Helen, Sam tested
    assert goal["seat 2"] == (4, pytest.approx((1 + 4 + 4 + 7) / 4))    # Omar, Tom, Jake, Aiko tested
    assert goal["competitive"] == (2, pytest.approx(5.0)) and goal["cooperative"] == (2, pytest.approx(7.0))
    assert goal["mixed"] == (4, pytest.approx(5.0))
    ids = {json.loads(line)["episode_id"] for line in (out / "episodes.jsonl").read_text().splitlines()}
    assert ids == {f"S-plain-{s}-seat{k}" for s in ("swm-bike-sale", "swm-late-project", "swm-noisy-neighbour",
                                                     "swm-mutual-friend") for k in (1, 2)}
    assert "| plain | seat 2 | 4 | 4.00 ± " in (out / "sotopia.md").read_text()


def test_bench_sotopia_warns_and_records_self_judging(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["bench", "sotopia", "--data", "shipped", "--policies", "plain", "--n", "1", "--max-turns", "1",
            "--seats", "second", "--db", str(tmp_path / "j.db"), "--out", str(out), "--no-progress"]
    result = CliRunner().invoke(main, args, obj={"llm": model()})
    assert result.exit_code == 0, result.output
    assert "warning: the judge is the tested agent's own model" in result.output
    assert "pass --judge-model (or SWM_MODEL_JUDGE)" in result.output, "left to its default, the judge needs one given"
    assert json.loads((out / "sotopia.json").read_text())["meta"]["self_judged"] is True
    assert (out / "sotopia.md").read_text().count("**Self-judged:**") == 1


@pytest.mark.parametrize("given", ["--judge-model", "SWM_MODEL_JUDGE"])
def test_the_self_judging_warning_says_what_was_given(given: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A judge model given as the agent's own is not fixed by passing --judge-model: the warning says to give
    another one, and where the judge's model came from."""
    from swm.testing import FakeOpenAIServer

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeOpenAIServer() as server:
        judge = ["--judge-model", server.model_spec] if given == "--judge-model" else []
        if given == "SWM_MODEL_JUDGE":
            monkeypatch.setenv("SWM_MODEL_JUDGE", server.model_spec)
        args = ["bench", "sotopia", "--data", "shipped", "--policies", "plain", "--n", "1", "--max-turns", "1",
                "--seats", "second", "--model", server.model_spec, *judge, "--db", str(tmp_path / "j.db"), "--out",
                str(tmp_path / "out"), "--no-progress"]
        result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    (warning,) = [line for line in result.stderr.splitlines() if line.startswith("warning: the judge")]
    assert "pass --judge-model (or" not in warning, warning
    said = {"--judge-model": "the judge model given (--judge-model or the config's judge-model) is the agent's: "
                             "give it another one",
            "SWM_MODEL_JUDGE": "SWM_MODEL_JUDGE names the agent's model: set it to another one"}[given]
    assert said in warning, warning


def test_judge_defaults_to_its_own_model(monkeypatch: pytest.MonkeyPatch) -> None:
    from swm.context import SWMContext

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    ctx = SWMContext(model="gpt-4o-mini")
    assert ctx.spec_for("agent") == "gpt-4o-mini" and ctx.spec_for("judge") == "gpt-4o" and not ctx.judge_is_agent()
    monkeypatch.setenv("SWM_MODEL_JUDGE", "o3")
    assert SWMContext(model="gpt-4o-mini").spec_for("judge") == "o3"
    assert SWMContext(model="x", models={"judge": "y"}).spec_for("judge") == "y"
    monkeypatch.delenv("SWM_MODEL_JUDGE")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")  # a local server: no gpt-4o there
    local = SWMContext(model="qwen")
    assert local.spec_for("judge") == "qwen" and local.judge_is_agent()


def test_the_sotopia_sample_ships_in_the_package_and_is_the_bench_default() -> None:
    from swm.commands.bench_sotopia import _scenarios, sotopia_command
    from swm.scenarios import SOTOPIA_SAMPLE

    package = Path(__import__("swm").__file__).resolve().parent
    assert SOTOPIA_SAMPLE.is_relative_to(package) and SOTOPIA_SAMPLE.is_file()
    assert (SOTOPIA_SAMPLE.parent / "NOTICE.md").read_text().count("CC BY-SA 4.0") >= 1
    assert len(_scenarios(True, None, None)) == 70 and len(_scenarios(False, None, None)) == 146
    shown = " ".join(CliRunner().invoke(main, ["bench", "sotopia", "--help"]).output.split())
    assert "shared" not in shown and "swm/data/sotopia/" in shown
    assert not any("shared" in (o.help or "") for o in sotopia_command.params)


def test_setting_from_scenario_metadata() -> None:
    from collections import Counter

    from swm.scenarios import load_sotopia
    from swm.social.bench import setting_of

    hard = Counter(setting_of(s) for s in load_sotopia(hard=True))
    assert hard == {"competitive": 25, "mixed": 45}  # craigslist 20 + deal-or-no-deal 5; the rest mixed
    everything = Counter(setting_of(s) for s in load_sotopia())
    assert everything["cooperative"] == 10  # the mutual-friends scenarios


def test_an_id_with_a_slash_exports_through_the_one_sanitiser(tmp_path: Path) -> None:
    from swm.filenames import file_name
    from swm.scenarios import SHIPPED

    row = json.loads(SHIPPED.read_text(encoding="utf-8").splitlines()[0])
    data = tmp_path / "s.jsonl"
    data.write_text(json.dumps({**row, "id": "deals/bike"}) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    args = ["bench", "sotopia", "--data", str(data), "--policies", "plain", "--max-turns", "1", "--seats", "first",
            "--db", str(tmp_path / "s.db"), "--thread-id", "runs/one", "--out", str(out), "--no-progress"]
    for _ in range(2):  # the export runs again on a rerun, from the stored ids
        result = CliRunner().invoke(main, args, obj={"llm": model()})
        assert result.exit_code == 0, result.output
    assert [p.name for p in (out / "transcripts").iterdir()] == [f"{file_name('runs/one-plain-deals/bike-seat1')}.txt"]
    assert file_name("deals/bike") != file_name("deals_bike") == "deals_bike"
    assert all("/" not in file_name(k) and not file_name(k).startswith(".") for k in ("../x", "a/b", "", "..", "-x"))


def test_a_run_pinned_before_an_option_existed_resumes_with_the_value_it_had(tmp_path: Path) -> None:
    from swm.checkpoints import ExperienceStore
    from swm.checkpoints.runs import pin_run_options

    store = ExperienceStore(tmp_path / "s.db")
    assert pin_run_options(store, "old", {"max_turns": 3}) == []  # begun before act_order was an option
    assert pin_run_options(store, "old", {"max_turns": 3, "act_order": "sotopia"}, added={"act_order": "sotopia"})
    with pytest.raises(InputError, match="act_order: 'sotopia' → 'prefix'"):
        pin_run_options(store, "old", {"max_turns": 3, "act_order": "prefix"}, added={"act_order": "sotopia"})


def test_a_second_run_of_a_held_thread_is_refused_before_it_builds_anything(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The lease is checked first: a run refused because another holds the thread builds no context (models,
    stores), records no run and makes no --out folder; it did all three, then was refused."""
    from swm.checkpoints import ExperienceStore, hold_lease
    from swm.commands import bench_sotopia

    built: list[object] = []
    make_context = bench_sotopia.make_context
    monkeypatch.setattr(bench_sotopia, "make_context", lambda *a, **k: built.append(a) or make_context(*a, **k))
    db, out = tmp_path / "run.db", tmp_path / "out"
    with hold_lease(db, "held"):
        result = CliRunner().invoke(main, ["bench", "sotopia", "--n", "1", "--db", str(db), "--thread-id", "held",
                                           "--model", "m@http://127.0.0.1:9/v1", "--out", str(out)])
    assert result.exit_code == 5 and "error: thread held is already running" in result.output, result.output
    assert built == [], "the context was built before the refusal"
    store = ExperienceStore(db)
    assert not store.has_table("swm_runs") or store.count("swm_runs") == 0, "the refused run recorded itself"
    assert not out.exists(), "the refused run made its --out folder"
