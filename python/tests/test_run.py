"""run(agent=callable): a Python agent inside pincer's own runner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import pincer_bench as pb

SOLUTIONS = {
    "terminal-make-project": "mkdir -p ~/projects/pincer && echo fast > ~/projects/pincer/README\n",
}


class Scripted:
    """Types a task's known solution, then says it is done; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.seen: list[dict] = []

    def __call__(self, obs: dict):
        self.calls += 1
        self.seen.append({k: obs[k] for k in ("task", "step")})
        assert "checkpoints" not in obs  # agents are not shown the grader
        if obs["step"] == 0:
            return {"action": "type", "text": SOLUTIONS[obs["task"]]}
        # pincer ends the run once every checkpoint holds; until then, wait a little.
        return {"action": "wait", "seconds": 0.3}


def test_a_python_agent_runs_in_the_runner(tmp_path: Path) -> None:
    agent = Scripted()
    out = tmp_path / "run"
    result = pb.run("demo", agent, task_ids=["terminal-make-project"], repeat=2, parallel=2,
                    out=str(out))
    records = result["records"]
    assert [r["termination"] for r in records] == ["success", "success"]
    assert {r["repeat"] for r in records} == {0, 1}
    assert len({r["env_set"] for r in records}) == 2  # one task run on each desktop
    assert all(r["agent"] == "python:callable" for r in records)
    # Each task run asked the agent at least once, starting from step 0 (the run ends by
    # itself once the typed command has made every checkpoint pass).
    assert sum(1 for seen in agent.seen if seen["step"] == 0) >= 2
    assert Path(result["report"]).is_file()
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["task"] == "terminal-make-project"

    # The run is pincer's: resume skips what finished, a second run into it is refused.
    calls = agent.calls
    again = pb.run("demo", agent, task_ids=["terminal-make-project"], repeat=2, out=str(out), resume=True)
    assert len(again["records"]) == 2 and agent.calls == calls  # nothing ran again
    with pytest.raises(pb.PincerError, match="already holds results"):
        pb.run("demo", agent, task_ids=["terminal-make-project"], out=str(out))


def test_a_failed_attempt_is_retried_and_the_agent_told_why(tmp_path: Path) -> None:
    told: list[list[str]] = []

    def learner(obs: dict):
        if obs["step"] == 0:
            told.append(list(obs["feedback"]))
        if not any("did not pass" in f for f in obs["feedback"]) and obs["step"] == 0 and len(told) == 1:
            return {"action": "complete"}  # too early: the checkpoints do not hold
        if obs["step"] == 0:
            return {"action": "type", "text": SOLUTIONS[obs["task"]]}
        return {"action": "wait", "seconds": 0.3}

    result = pb.run("demo", learner, task_ids=["terminal-make-project"], feedback="end", attempts=2,
                    out=str(tmp_path / "run"))
    (rec,) = result["records"]
    assert rec["termination"] == "success"
    assert [a["termination"] for a in rec["retried"]] == ["false-completion"]
    assert told[0] == []
    assert told[1][0].startswith("attempt 1 of 2 failed (false-completion)")
    assert any(line.startswith("checkpoint ") and "did not pass" in line for line in told[1]), told[1]
    assert "Success by attempt" in (tmp_path / "run" / "report.md").read_text()
    with pytest.raises(ValueError, match="--attempts 2"):
        pb.run("demo", learner, task_ids=["terminal-make-project"], feedback="end", out=str(tmp_path / "x"))


def test_an_agent_asked_for_video_sees_the_screens_last_moments(tmp_path: Path) -> None:
    seen: list[list[dict]] = []

    def looking(obs: dict):
        seen.append(obs["views"]["desktop"]["video"])
        if obs["step"] == 0:
            return {"action": "type", "text": SOLUTIONS[obs["task"]]}
        return {"action": "wait", "seconds": 0.3}

    result = pb.run("demo", looking, task_ids=["terminal-make-project"], observe="marks,video=1s@5fps",
                    out=str(tmp_path / "run"), report=False)
    assert result["records"][0]["termination"] == "success"
    frames = [f for video in seen for f in video]
    assert frames, "at least one frame of the screen's last second"
    assert all(f["png"].startswith(b"\x89PNG") and 0 <= f["ago_ms"] <= 1000 for f in frames)


def test_a_run_records_video_as_pincer_run_does(tmp_path: Path) -> None:
    def solver(obs: dict):
        if obs["step"] == 0:
            return {"action": "type", "text": SOLUTIONS[obs["task"]]}
        return {"action": "wait", "seconds": 0.3}

    out = tmp_path / "run"
    result = pb.run("demo", solver, task_ids=["terminal-make-project"], video=5, out=str(out),
                    report=False)
    (rec,) = result["records"]
    assert rec["termination"] == "success"
    video = out / rec["trajectory"] / "video-desktop.mp4"
    assert video.is_file() and video.stat().st_size > 0
    with pytest.raises(pb.PincerError, match="give 1 to 60"):
        pb.run("demo", solver, task_ids=["terminal-make-project"], video=0, out=str(tmp_path / "x"))


def test_an_agent_that_raises_or_answers_garbage(tmp_path: Path) -> None:
    def raising(obs: dict):
        raise RuntimeError("the model is down")

    result = pb.run("demo", raising, task_ids=["terminal-make-project"], out=str(tmp_path / "a"), report=False)
    (rec,) = result["records"]
    assert rec["termination"] == "agent-error"
    assert "RuntimeError" in rec["detail"] and "the model is down" in rec["detail"]
    assert result["report"] is None

    result = pb.run("demo", lambda obs: {"action": "teleport"}, task_ids=["terminal-make-project"],
                    out=str(tmp_path / "b"), report=False)
    (rec,) = result["records"]
    assert rec["termination"] == "invalid-action" and "teleport" in rec["detail"]


def test_an_agent_that_is_not_callable_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="callable"):
        pb.run("demo", "oracle", out=str(tmp_path / "c"))


def test_the_cli_comes_with_the_package(pincer_cli: Path) -> None:
    import subprocess

    version = subprocess.run([str(pincer_cli), "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith("pincer ")
    listed = subprocess.run([str(pincer_cli), "task", "list", "--tasks", "demo"], capture_output=True, text=True)
    assert listed.returncode == 0 and "terminal-make-project" in listed.stdout


def test_ctrl_c_records_the_run_as_aborted_and_stops_the_desktop(tmp_path: Path, pincer_cli: Path) -> None:
    import signal
    import subprocess

    from conftest import python_as_in_a_terminal

    out = tmp_path / "run"
    script = (
        "import pincer_bench as pb\n"
        "def agent(obs):\n"
        "    print('acting', flush=True)\n"
        "    return {'action': 'wait', 'seconds': 0.2}\n"
        "try:\n"
        f"    pb.run('demo', agent, task_ids=['terminal-make-project'], out={str(out)!r}, report=False)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
    )
    proc = python_as_in_a_terminal(script)
    try:
        assert proc.stdout.readline().strip() == "acting"
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert "interrupted" in rest and proc.returncode == 0
    (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert record["termination"] == "aborted"
    listed = subprocess.run([str(pincer_cli), "desktop", "list"], capture_output=True, text=True)
    assert f"run{proc.pid % 100_000}-" not in listed.stdout


def test_the_runner_starts_gnome_wayland_desktops_of_its_own(tmp_path: Path) -> None:
    # session="wayland": the run's desktop is a headless GNOME Shell (tests/tests/wayland.rs
    # checks the session the desktop of `pincer run --session wayland` runs).
    agent = Scripted()
    result = pb.run("demo", agent, task_ids=["terminal-make-project"], session="wayland",
                    out=str(tmp_path / "run"))
    assert [r["termination"] for r in result["records"]] == ["success"]
    with pytest.raises(ValueError, match="sway"):
        pb.run("demo", agent, task_ids=["terminal-make-project"], session="sway",
               out=str(tmp_path / "refused"))


def test_compat_crab_scores_crabs_tasks_as_crab_does(tmp_path: Path, pincer_cli: Path) -> None:
    # CRAB's answer task, imported from CRAB's files, run from Python under CRAB's scoring:
    # the record carries CRAB's label; a mode that does not exist and pincer's own tasks
    # are refused (tests/tests/crab_compat.rs checks the scoring itself).
    import subprocess

    fixtures = Path(__file__).resolve().parents[2] / "fixtures" / "crab-benchmark-v0"
    tasks = tmp_path / "crab"
    subprocess.run([str(pincer_cli), "task", "import-crab", str(fixtures), "--out", str(tasks)],
                   check=True, capture_output=True)
    task = "0a893c2e-eec5-47cc-a930-eb01c5f17683"
    answer = json.loads((tasks / "ubuntu" / f"{task}.json").read_text())["compat"]["crab"][0]["args"]["text"]

    def agent(obs: dict) -> list[dict]:
        return [{"action": "wait", "seconds": 0.0}, {"action": "submit", "answer": answer}]

    own = pb.run(str(tasks / "ubuntu"), agent, task_ids=[task], out=str(tmp_path / "own"), report=False)
    assert [(r["termination"], r.get("compat")) for r in own["records"]] == [("success", None)]
    crab = pb.run(str(tasks / "ubuntu"), agent, task_ids=[task], compat="crab",
                  out=str(tmp_path / "crab-run"), report=False)
    (record,) = crab["records"]
    assert record["compat"] == {"mode": "crab", "reason": "success", "success": True}
    with pytest.raises(ValueError, match="no scoring mode 'crabs'"):
        pb.run(str(tasks / "ubuntu"), agent, task_ids=[task], compat="crabs", out=str(tmp_path / "x"))
    with pytest.raises(pb.PincerError, match="did not come from CRAB's files"):
        pb.run("demo", agent, task_ids=["terminal-make-project"], compat="crab", out=str(tmp_path / "y"))
