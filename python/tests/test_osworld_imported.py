"""OSWorld's own tasks through OSWorld's interface: imported with `pincer task
import-osworld`, started from OSWorld's task JSON and scored by OSWorld's own metric code."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from pincer_bench import PincerError
from pincer_bench.osworld import DesktopEnv

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures/osworld-2024/evaluation_examples"
# Set the default video player to VLC (no setup; xdg-mime is asked at the end).
PLAYER = ("multi_apps", "937087b6-f668-4ba6-9110-60682ee33441")
# Switch off Bluetooth: infeasible on purpose.
BLUETOOTH = ("os", "b3d4a89c-53f2-4d6b-8b6a-541fb5d205fa")
# Its files are not in the (empty) cache: left out, and starting it says why.
NEEDS_FILES = ("gimp", "77b8ab4d-994f-43ac-8930-8ca087d7c4b4")


def osworld_task(domain: str, uuid: str) -> dict:
    return json.loads((FIXTURE / "examples" / domain / f"{uuid}.json").read_text())


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, pincer_cli: Path):
    root = tmp_path_factory.mktemp("osworld imported é")
    folder = root / "evaluation_examples"
    index = {}
    for domain, uuid in (PLAYER, BLUETOOTH, NEEDS_FILES):
        (folder / "examples" / domain).mkdir(parents=True, exist_ok=True)
        (folder / "examples" / domain / f"{uuid}.json").write_text(
            json.dumps(osworld_task(domain, uuid))
        )
        index.setdefault(domain, []).append(uuid)
    (folder / "test_all.json").write_text(json.dumps(index))
    tasks, cache = root / "tasks", root / "cache"
    subprocess.run(
        [pincer_cli, "task", "import-osworld", folder, "--out", tasks, "--assets", cache],
        check=True,
        capture_output=True,
    )
    e = DesktopEnv(str(tasks), assets=str(cache), out=str(root / "run"), screen_size=(1024, 768))
    yield e
    e.close()


def desktop_home() -> Path:
    """The home of the local desktop the session started (the newest one)."""
    homes = Path(os.environ["PINCER_STATE_DIR"]).glob("desktops/*/home")
    return max(homes, key=lambda h: h.stat().st_mtime)


def test_an_osworld_task_json_starts_its_imported_task_and_is_scored_by_osworld(env) -> None:
    obs = env.reset(osworld_task(*PLAYER))
    assert "VLC" in obs["instruction"]
    home = desktop_home()
    # What an agent would leave: VLC as the handler of two video types.
    (home / ".local/share/applications").mkdir(parents=True, exist_ok=True)
    (home / ".local/share/applications/vlc.desktop").write_text(
        "[Desktop Entry]\nType=Application\nName=VLC\nExec=vlc %U\nMimeType=video/mp4;\n"
    )
    (home / ".config").mkdir(exist_ok=True)
    (home / ".config/mimeapps.list").write_text(
        "[Default Applications]\nvideo/mp4=vlc.desktop\nvideo/webm=vlc.desktop\n"
    )
    # The goal holding does not end an OSWorld episode: the agent does.
    obs, reward, done, info = env.step("WAIT", pause=0.1)
    assert not done
    obs, reward, done, info = env.step("DONE")
    assert done and info["record"]["score"] == 1.0, info
    assert env.evaluate() == 1.0

    # Undone: OSWorld's check_include_exclude scores 0.
    env.reset({"id": PLAYER[1]})
    (home / ".config/mimeapps.list").unlink()
    (home / ".local/share/applications/vlc.desktop").unlink()
    assert env.evaluate() == 0.0


def test_fail_is_the_right_answer_only_on_an_infeasible_task(env) -> None:
    env.reset(osworld_task(*BLUETOOTH))
    obs, reward, done, info = env.step("FAIL")
    assert done
    assert env.evaluate() == 1.0
    env.reset(osworld_task(*BLUETOOTH))
    env.step("DONE")
    assert env.evaluate() == 0.0
    # FAIL on a feasible task scores 0, as in OSWorld.
    env.reset(osworld_task(*PLAYER))
    env.step("FAIL")
    assert env.evaluate() == 0.0


def test_a_task_that_cannot_run_here_says_why(env) -> None:
    with pytest.raises(PincerError, match="needs files"):
        env.reset(osworld_task(*NEEDS_FILES))
