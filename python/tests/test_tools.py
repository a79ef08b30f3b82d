"""API tools from Python: `run(..., tools=True)` and `PincerEnv(tools=True)` offer a task's
declared tools, as `pincer run --tools` does. The bundled `example-calendar-dentist` starts
a real Radicale (Debian's `radicale`) on the desktop in its setup and declares `add_event`,
run by the guest under bubblewrap; its checkpoint asks Radicale itself."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import pincer_bench as pb

TASK = "example-calendar-dentist"
BOOK = {"title": "Dentist", "date": "2026-12-03", "hour": 9}

pytestmark = pytest.mark.skipif(
    not (shutil.which("radicale") and shutil.which("bwrap")),
    reason="needs Debian's radicale and bubblewrap",
)


class Booker:
    """Books the dentist through `api_add_event` at its first step, then waits; keeps what it
    was shown."""

    def __init__(self) -> None:
        self.seen: list[dict] = []

    def __call__(self, obs: dict):
        self.seen.append({k: obs[k] for k in ("step", "feedback", "tools")})
        if obs["step"] == 0:
            return {"action": "api_add_event", **BOOK}
        if any("no API tools are offered" in f for f in obs["feedback"]):
            return {"action": "infeasible", "reason": "the tool was refused"}
        return {"action": "wait", "seconds": 0.3}


def steps_of(out: Path) -> list[dict]:
    (steps,) = out.rglob("steps.jsonl")
    return [json.loads(line) for line in steps.read_text().splitlines()]


def test_a_python_agent_books_through_the_api_tool_when_offered(tmp_path: Path) -> None:
    agent = Booker()
    out = tmp_path / "run"
    result = pb.run("examples", agent, task_ids=[TASK], tools=True, out=str(out), report=False)
    (rec,) = result["records"]
    assert rec["termination"] == "success", rec
    assert rec["tool_calls"] == 1 and rec["actions"] >= 1
    # The agent was told which tools it has, and what the call did.
    names = [t["name"] for t in agent.seen[0]["tools"]]
    assert names == ["api_add_event"]
    assert agent.seen[0]["tools"][0]["parameters"]["required"] == ["title", "date", "hour"]
    results = [r for s in steps_of(out) for r in s["results"]]
    assert any("tool add_event succeeded" in r for r in results), results


def test_without_tools_the_tool_action_is_refused(tmp_path: Path) -> None:
    agent = Booker()
    out = tmp_path / "run"
    result = pb.run("examples", agent, task_ids=[TASK], out=str(out), report=False)
    (rec,) = result["records"]
    assert rec["termination"] == "infeasible", rec
    assert agent.seen[0]["tools"] == []
    told = [f for seen in agent.seen for f in seen["feedback"]]
    assert any("no API tools are offered" in f for f in told), told
    # The attempt is an invalid action, counted as `pincer run` counts it: a tool call that
    # did not run.
    results = [r for s in steps_of(out) for r in s["results"]]
    assert results[0].startswith("invalid: no API tools are offered"), results
    assert rec["tool_calls"] == 1


def test_a_gym_env_offers_the_tools_in_the_generic_form(tmp_path: Path) -> None:
    env = pb.PincerEnv("examples", TASK, tools=True, out=str(tmp_path / "run"))
    try:
        assert [t["name"] for t in env.session.task(TASK)["tools"]] == ["api_add_event"]
        obs, _ = env.reset(seed=0)
        assert [t["name"] for t in obs["tools"]] == ["api_add_event"]
        obs, reward, terminated, truncated, info = env.step(
            {"action": "tool", "name": "add_event", "arguments": BOOK})
        for _ in range(20):  # the checkpoint holds once Radicale serves the event
            if terminated or truncated:
                break
            obs, reward, terminated, truncated, info = env.step({"action": "wait", "seconds": 0.3})
        assert terminated and info["success"], info
        assert info["record"]["tool_calls"] == 1
    finally:
        env.close()
