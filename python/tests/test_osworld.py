"""The OSWorld-compatible DesktopEnv: pyautogui strings parsed, never executed."""

from __future__ import annotations

from pathlib import Path

import pytest

from pincer_bench.osworld import ActionRefused, DesktopEnv

TASK = "terminal-make-project"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory):
    e = DesktopEnv("demo", out=str(tmp_path_factory.mktemp("osworld") / "run"))
    yield e
    e.close()


def test_an_osworld_agent_solves_a_task(env) -> None:
    obs = env.reset({"id": TASK, "instruction": "ignored: pincer's task says what to do"})
    assert obs["screenshot"].startswith(b"\x89PNG")
    assert obs["accessibility_tree"] and "projects/pincer" in obs["instruction"]
    assert obs["terminal"] is None
    obs, reward, done, info = env.step(
        "import pyautogui\n"
        "pyautogui.typewrite('mkdir -p ~/projects/pincer && echo fast > ~/projects/pincer/README')\n"
        "pyautogui.press('enter')\n"
    )
    # pincer ends a task run once every checkpoint holds; an agent that says DONE first
    # ends it the same way.
    for then in ["WAIT"] * 20 + ["DONE"]:
        if done:
            break
        obs, reward, done, info = env.step(then, pause=0.5)
    assert done and info["termination"] == "success"
    assert env.evaluate() == 1.0
    assert obs["screenshot"].startswith(b"\x89PNG")


def test_code_that_is_not_a_pyautogui_call_is_refused(env, tmp_path: Path) -> None:
    env.reset(TASK)
    marker = tmp_path / "pwned"
    for attack in [
        f"import os\nos.system('touch {marker}')",
        f"__import__('os').system('touch {marker}')",
        f"pyautogui.click(100, 100); open('{marker}', 'w')",
    ]:
        with pytest.raises(ActionRefused, match="pyautogui"):
            env.step(attack)
    assert not marker.exists()
    # Nothing was carried out: the episode goes on, and FAIL ends it unsolved.
    obs, reward, done, info = env.step("FAIL")
    assert done and info["termination"] == "infeasible"
    assert env.evaluate() == 0.0


def test_evaluate_judges_the_state_left(env) -> None:
    env.reset(TASK)
    env.step("pyautogui.write('mkdir -p ~/projects/pincer\\n')")
    assert env.evaluate() == 0.0  # the README is missing: not done
    with pytest.raises(Exception, match="reset"):
        env.step("pyautogui.press('enter')")
