"""OSWorld's ``DesktopEnv`` interface over pincer, so OSWorld agents run unchanged.

Agents send what OSWorld's ``pyautogui`` action space takes: Python code strings of
pyautogui calls, which are *parsed* into pincer's typed actions (``pincer_bench.pyautogui``)
and never executed, and the special strings ``WAIT``, ``DONE`` and ``FAIL``. Anything that
is not a plain pyautogui call with literal arguments is refused with ``ActionRefused``
(a ``ValueError``) saying what is accepted. pincer action dicts are accepted too.

Tasks are pincer's: ``reset(task_config)`` takes a pincer task id, or a dict whose ``id``
names one. OSWorld's own tasks run once imported (``pincer task import-osworld DIR --out
TASKS``; ``DesktopEnv(TASKS, assets=CACHE)``): then ``task_config`` may be OSWorld's own
task JSON, whose ``id`` (a UUID) finds ``<domain>/<id>``, and ``evaluate()`` is OSWorld's
score, computed by OSWorld's own metric code after the task's postconfig. For pincer's
tasks ``evaluate()`` is 1.0 if the task run succeeded, else 0.0. Every episode is a pincer
task run, recorded in the run directory with its trajectory and the report.

Where it differs from OSWorld: a step is observed as soon as its actions are carried out
and evaluated (no ``pause`` after every action; ``WAIT`` waits ``pause`` seconds); the
episode ends as pincer's runner ends it (every checkpoint holding ends it before ``DONE``);
``accessibility_tree`` is pincer's indented text (role, name, bounds), not OSWorld's XML;
``FAIL`` scores 0 on a feasible task (1 on an imported infeasible one, as in OSWorld); one
string of several calls is several of pincer's steps.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from ._pincer import PincerError
from .session import Session, record_completion
from .gym import completion as _completion
from .pyautogui import ActionRefused, Parser

__all__ = ["ActionRefused", "DesktopEnv"]

# OSWorld's special actions.
_SPECIAL = {"WAIT", "DONE", "FAIL"}


class DesktopEnv:
    """A desktop with OSWorld's interface: ``reset``, ``step``, ``evaluate``, ``close``.

    ``tasks`` is a pincer task file, directory or bundled suite; without ``sets`` or ``vm``
    (an image whose VM is started and reset before every episode, as OSWorld's are), a
    local desktop is started (``screen_size``) and stopped by ``close()``. Observations are
    OSWorld's: ``screenshot`` (PNG bytes), ``accessibility_tree`` (text, with
    ``require_a11y_tree``), ``terminal`` (always None) and ``instruction``.
    """

    def __init__(
        self,
        tasks: str = "demo",
        *,
        action_space: str = "pyautogui",
        screen_size: tuple[int, int] = (1920, 1080),
        require_a11y_tree: bool = True,
        sets: Optional[str] = None,
        out: Optional[str] = None,
        envs: Optional[str] = None,
        vm: Optional[str] = None,
        assets: Optional[str] = None,
        allow_network: bool = False,
        **_ignored: Any,
    ):
        if action_space != "pyautogui":
            raise ValueError(
                f"action_space {action_space!r}: pincer's DesktopEnv takes pyautogui code "
                "strings (and pincer action dicts)"
            )
        observe = "screenshot,tree" if require_a11y_tree else "screenshot"
        self.session = Session(
            tasks,
            sets=sets,
            observe=observe,
            size=screen_size,
            out=out,
            agent="python:osworld",
            envs=envs,
            vm=vm,
            assets=assets,
            allow_network=allow_network,
        )
        self.action_space = action_space
        self.screen_size = screen_size
        self._parser = Parser()
        self._task: Optional[dict] = None
        self._last: Optional[dict] = None
        self._checkpoints: Optional[list] = None
        self._record: Optional[dict] = None
        self._role = "desktop"

    @property
    def out(self) -> str:
        """The run directory: results.jsonl, trajectories, the report."""
        return self.session.out

    def reset(
        self,
        task_config: Union[str, dict, None] = None,
        seed: Optional[int] = None,
        options: Optional[dict] = None,
    ) -> dict:
        """Starts an episode of the task (its setup runs); the first observation."""
        if task_config is None:
            task_id = self.session.task_ids()[0]
        elif isinstance(task_config, str):
            task_id = self._imported(task_config)
        else:
            task_id = task_config.get("id")
            if not isinstance(task_id, str):
                raise ValueError("task_config needs an 'id' naming a pincer task")
            task_id = self._imported(task_id)
        self._task = self.session.task(task_id)
        roles = [r for r, p in self._task["roles"].items() if p == "linux"]
        if len(roles) != 1:
            raise PincerError(
                f"task {task_id} has {len(roles)} desktops; OSWorld's interface drives one"
            )
        self._role = roles[0]
        self._parser = Parser()
        self._record = None
        now = self.session.begin(task_id, seed or 0)
        self._last, self._checkpoints = now["observation"], now["checkpoints"]
        return self._observation(self._last)

    def _imported(self, task_id: str) -> str:
        """A pincer task id for ``task_id``: itself, or the one imported OSWorld task
        ``<domain>/<task_id>`` (OSWorld's task files name a task by its UUID alone; 11
        UUIDs are used in two domains, and then the caller names the domain)."""
        left_out = dict(self.session.left_out())
        known = self.session.task_ids() + list(left_out)
        found = [task_id] if task_id in known else sorted(
            t for t in known if "/" in t and t.split("/", 1)[1] == task_id
        )
        if len(found) > 1:
            raise ValueError(
                f"task {task_id} is in several domains ({', '.join(found)}): "
                "give task_config['id'] as '<domain>/<id>'"
            )
        if found and found[0] in left_out:
            raise PincerError(f"task {found[0]} cannot run here: {left_out[found[0]]}")
        return found[0] if found else task_id

    def _observation(self, obs: Optional[dict]) -> dict:
        view = (obs or {}).get("views", {}).get(self._role, {})
        return {
            "screenshot": view.get("screenshot"),
            "accessibility_tree": view.get("tree"),
            "terminal": None,
            "instruction": self._task["instruction"] if self._task else None,
        }

    def _actions(self, action: Any, pause: float) -> list:
        if isinstance(action, dict):
            return [action]
        if not isinstance(action, str):
            raise ActionRefused(
                f"an action is a pyautogui code string, WAIT, DONE, FAIL or a pincer action "
                f"dict, not {type(action).__name__}"
            )
        special = action.strip()
        if special == "WAIT":
            return [{"action": "wait", "seconds": min(max(pause, 0.0), 10.0)}]
        if special == "DONE":
            return [{"action": "complete"}]
        if special == "FAIL":
            return [{"action": "infeasible", "reason": "the agent said FAIL"}]
        actions = self._parser.parse(action)
        if not actions:
            return [{"action": "wait", "seconds": 0.0}]
        for a in actions:
            a.setdefault("env", self._role)
        return actions

    def step(self, action: Any, pause: float = 2) -> tuple[dict, float, bool, dict]:
        """Carries out one OSWorld action; ``(observation, reward, done, info)``. The
        reward is the change in completion (checkpoints passed / checkpoints)."""
        if self._task is None or self._record is not None:
            raise PincerError("no episode is running: call reset(task_config) first")
        before = _completion(self._checkpoints)
        now = self.session.step(self._actions(action, pause))
        if not now["ended"]:
            self._last, self._checkpoints = now["observation"], now["checkpoints"]
            info = {"checkpoints": self._checkpoints, "feedback": self._last["feedback"]}
            return self._observation(self._last), _completion(self._checkpoints) - before, False, info
        self._record = now["record"]
        if now["observation"] is not None:
            self._last = now["observation"]
        done = record_completion(self._record)
        info = {
            "termination": self._record["termination"],
            "detail": self._record.get("detail"),
            "record": self._record,
        }
        return self._observation(self._last), done - before, True, info

    def evaluate(self) -> float:
        """OSWorld's score of an imported OSWorld task (0..1); 1.0 or 0.0 for a pincer task
        (succeeded or not). An episode still running is ended as OSWorld judges it: on the
        state the agent left (pincer's ``complete``, then the task's postconfig)."""
        if self._task is None:
            raise PincerError("no episode: call reset(task_config) first")
        if self._record is None:
            # Declaring the task complete always ends a pincer task run.
            self._record = self.session.step({"action": "complete"})["record"]
        score = self._record.get("score")
        if score is not None:
            return float(score)
        return 1.0 if self._record["termination"] == "success" else 0.0

    def close(self) -> None:
        """Aborts a running episode and stops the desktop started for it."""
        self.session.close()

