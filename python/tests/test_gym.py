"""PincerEnv: a Gymnasium environment over pincer's bundled tasks on a real local desktop."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium
import pytest

import pincer_bench as pb

TASK = "terminal-make-project"
OTHER = "terminal-count-lines"
# The commands, then waits (not steps) while the shell runs them, then done.
SOLUTION = [
    {"action": "type", "text": "mkdir -p ~/projects/pincer\n"},
    {"action": "type", "text": "echo fast > ~/projects/pincer/README\n"},
    *[{"action": "wait", "seconds": 0.3}] * 30,
    {"action": "complete"},
]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("gym") / "run"
    e = pb.PincerEnv("demo", TASK, task_ids=[TASK, OTHER], out=str(out), observe="marks,tree")
    yield e
    e.close()


def test_it_is_a_gymnasium_env(env) -> None:
    assert isinstance(env, gymnasium.Env)
    schema = pb.action_schema()
    names = {alt["properties"]["action"]["const"] for alt in schema["oneOf"]}
    assert {"click", "type", "key", "hotkey", "scroll", "drag", "move", "complete"} <= names
    assert "tap" not in names  # a desktop task gets no phone actions
    assert env.action_space.contains({"action": "click", "target": {"element": 3}})
    assert not env.action_space.contains({"action": "click"})
    assert not env.action_space.contains({"action": "exec", "argv": ["rm", "-rf", "/"]})
    assert env.action_space.contains(env.action_space.sample())


def test_a_scripted_policy_solves_a_task(env) -> None:
    obs, info = env.reset(seed=3)
    assert env.observation_space.contains(obs)
    assert obs["task"] == TASK and "projects/pincer" in obs["instruction"]
    view = obs["views"]["desktop"]
    assert view["marked"].startswith(b"\x89PNG") and view["elements"]
    assert "terminal" in view["tree"].lower()
    assert info["completion"] == 0.0 and set(info["checkpoints"]) == {"dir", "readme"}
    assert "checkpoints" not in obs  # the grader is in info, never shown to the policy

    rewards, ended = [], None
    for action in SOLUTION:
        obs, reward, terminated, truncated, info = env.step(action)
        rewards.append(reward)
        assert not truncated
        if terminated:
            ended = info
            break
    assert ended is not None, "complete ends the episode"
    assert ended["success"] and ended["termination"] == "success"
    assert sum(rewards) == pytest.approx(1.0) == ended["completion"]
    assert all(r >= 0 for r in rewards)
    assert ended["checkpoints"]["readme"]["passed"]
    assert "fast" in ended["checkpoints"]["readme"]["feedback"]

    # The episode is a pincer task run: recorded with its trajectory.
    records = [json.loads(line) for line in Path(env.out, "results.jsonl").read_text().splitlines()]
    assert records[-1]["task"] == TASK and records[-1]["termination"] == "success"
    assert records[-1]["agent"] == "python:gym" and records[-1]["seed"] == 3
    steps = Path(env.out, records[-1]["trajectory"], "steps.jsonl").read_text().splitlines()
    assert len(steps) == len(rewards)


def test_a_policy_that_declares_done_too_early_fails_another_task(env) -> None:
    obs, _ = env.reset(options={"task": OTHER})
    assert obs["task"] == OTHER
    obs, reward, terminated, truncated, info = env.step({"action": "complete"})
    assert terminated and not truncated
    assert not info["success"] and info["termination"] == "false-completion"
    assert reward == 0.0 and info["completion"] == 0.0
    env.reset(options={"task": TASK})  # the other tests' task again


def test_the_step_limit_truncates(env) -> None:
    env.reset()
    truncated = terminated = False
    steps = 0
    while not (terminated or truncated):
        obs, _, terminated, truncated, info = env.step({"action": "key", "key": "shift"})
        steps += 1
        assert steps <= 15
    assert truncated and not terminated and info["termination"] == "step-limit"
    assert steps == 15
    assert obs["step"] == 15  # the state after the last action, not the one before


def test_a_list_of_actions_keeps_to_the_step_limit(env) -> None:
    env.reset()
    obs, _, terminated, truncated, info = env.step([{"action": "key", "key": "shift"}] * 40)
    assert truncated and info["termination"] == "step-limit"
    assert info["record"]["actions"] == 15


def test_a_bad_action_raises_and_costs_no_step(env) -> None:
    env.reset()
    with pytest.raises(pb.InvalidActionError, match="unknown action"):
        env.step({"action": "exec", "argv": ["sh", "-c", "touch /tmp/pwned"]})
    with pytest.raises(pb.InvalidActionError, match="target"):
        env.step({"action": "click", "target": "the OK button"})
    with pytest.raises(pb.InvalidActionError, match="empty list"):
        env.step([])
    with pytest.raises(pb.InvalidActionError, match="JSON"):
        env.step({"action": "scroll", "dx": float("nan"), "dy": 1})
    obs, *_ = env.step({"action": "key", "key": "shift"})
    assert obs["step"] == 1  # only the valid action counted


def test_an_element_that_is_not_there_is_feedback(env) -> None:
    env.reset()
    obs, reward, terminated, truncated, info = env.step(
        {"action": "click", "target": {"element": 99999}}
    )
    assert not (terminated or truncated)
    assert any("99999" in f for f in info["feedback"])


def test_reset_switches_task_and_report(env) -> None:
    obs, _ = env.reset(options={"task": OTHER})
    assert obs["task"] == OTHER and env.task_id == OTHER
    with pytest.raises(pb.PincerError, match="no task 'no-such-task'"):
        env.reset(options={"task": "no-such-task"})
    obs, _ = env.reset()  # a failed switch changes nothing
    assert obs["task"] == OTHER
    obs, _ = env.reset(options={"task": TASK})
    assert obs["task"] == TASK
    html = env.report()
    assert Path(html).is_file() and TASK in Path(html).read_text() and OTHER in Path(html).read_text()


def test_forked_vector_workers(tmp_path: Path) -> None:
    """Gymnasium's AsyncVectorEnv makes one env in this process, then forks its workers:
    each gets a runtime of its own (a forked runtime has no threads) and its own desktop."""
    from gymnasium.vector import AsyncVectorEnv

    def make(i: int):
        return lambda: pb.PincerEnv("demo", TASK, out=str(tmp_path / f"w{i}"))

    vec = AsyncVectorEnv([make(0), make(1)], context="fork", shared_memory=False)
    try:
        obs, info = vec.reset(seed=0)  # custom spaces batch as tuples, one per worker
        assert [o["task"] for o in obs] == [TASK, TASK]
        obs, rewards, terminated, truncated, info = vec.step(
            ({"action": "key", "key": "shift"},) * 2
        )
        assert [o["step"] for o in obs] == [1, 1]
        assert not any(terminated) and not any(truncated)
    finally:
        vec.close()


def test_an_env_never_closed_stops_its_desktop_at_exit(tmp_path: Path, pincer_cli: Path) -> None:
    import subprocess
    import sys

    script = (
        "import pincer_bench as pb\n"
        f"env = pb.PincerEnv('demo', {TASK!r}, out={str(tmp_path / 'run')!r})\n"
        "env.reset()\n"
        "import os; print(os.getpid())\n"  # and exit without env.close()
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    desktop = f"run{int(done.stdout) % 100_000}-s0-desktop"
    listed = subprocess.run([str(pincer_cli), "desktop", "list"], capture_output=True, text=True)
    assert desktop not in listed.stdout and listed.returncode == 0


def test_ctrl_c_in_a_step_ends_the_episode_aborted(tmp_path: Path) -> None:
    import json
    import signal
    import time

    from conftest import python_as_in_a_terminal

    out = tmp_path / "run"
    script = (
        "import pincer_bench as pb\n"
        f"env = pb.PincerEnv('demo', {TASK!r}, out={str(out)!r})\n"
        "env.reset()\n"
        "try:\n"
        "    print('stepping', flush=True)\n"
        "    env.step([{'action': 'wait', 'seconds': 1.0}] * 30)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
        "env.close()\n"
    )
    proc = python_as_in_a_terminal(script)
    try:
        assert proc.stdout.readline().strip() == "stepping"
        time.sleep(0.5)  # into the step
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=20)  # not the 30 s the waits would take
    finally:
        proc.kill()
    assert "interrupted" in rest and proc.returncode == 0
    (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert record["termination"] == "aborted"


def test_a_task_done_before_the_agent_acts_is_refused(tmp_path: Path) -> None:
    """A checkpoint that passes before any action would score without the agent: the
    episode is a broken setup, and reset says so instead of handing out an observation."""
    import json

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "already.json").write_text(json.dumps({
        "id": "already",
        "instruction": "Make /tmp exist.",
        "envs": {"desktop": {"platform": "linux"}},
        "checkpoints": [{"id": "tmp", "env": "desktop", "check": "dir_exists",
                         "args": {"path": "/tmp"}}],
        "limits": {"max_steps": 5, "max_seconds": 60},
    }))
    env = pb.PincerEnv(str(tasks), "already", out=str(tmp_path / "run"))
    try:
        with pytest.raises(pb.PincerError, match="before its first action: broken-setup"):
            env.reset()
    finally:
        env.close()
    (record,) = [json.loads(l) for l in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert record["termination"] == "broken-setup"
