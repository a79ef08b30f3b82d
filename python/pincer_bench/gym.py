"""A Gymnasium environment over pincer's tasks.

``reset`` starts a task run (its setup and initial check) and returns the first
observation; ``step`` carries out one action (or a list), evaluates, and returns the next.
Episodes end exactly as ``pincer run`` ends them, because they are ``pincer run``'s task
runs: the agent declares the task complete, gives up, the step or time limit is reached,
three unusable actions come in a row, or an environment fails. Each episode is recorded in
the run directory (``env.out``) like any other run: results, trajectory, report.

Reward is the change in completion (checkpoints passed / checkpoints), so an episode's
rewards add up to its completion rate. ``terminated`` is true when the task run ended by
itself (success or not), ``truncated`` when a step or time limit cut it short.
"""

from __future__ import annotations

from typing import Any, Optional

import gymnasium
from gymnasium import spaces

from ._pincer import InvalidActionError, action_schema, check_action
from .session import Session, record_completion

# Endings from outside the task's own dynamics: the step and time limits, a failed
# environment or evaluator, an interruption.
_TRUNCATING = {"step-limit", "time-limit", "environment-error", "evaluator-error", "aborted"}


def completion(checkpoints: Optional[list]) -> float:
    """Checkpoints passed / checkpoints (0 when there are none)."""
    if not checkpoints:
        return 0.0
    return sum(1 for c in checkpoints if c["passed"]) / len(checkpoints)


class ActionSpace(spaces.Space):
    """pincer's actions for one task's environments: dicts as ``action_schema(roles)``
    describes (``{"action": "click", "target": {"element": 4}}``)."""

    def __init__(self, roles: dict[str, str], screen: tuple[int, int], seed: Optional[int] = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.roles = dict(roles)
        self.screen = screen
        self.schema = action_schema(self.roles)

    def contains(self, x: Any) -> bool:
        try:
            check_action(x, self.roles)
        except (InvalidActionError, TypeError, ValueError):
            return False
        return True

    def sample(self, mask: Any = None, probability: Any = None) -> dict:
        """A click at a random point of a random Linux role, or a tap on an Android one."""
        role = sorted(self.roles)[int(self.np_random.integers(len(self.roles)))]
        x = int(self.np_random.integers(self.screen[0]))
        y = int(self.np_random.integers(self.screen[1]))
        kind = "tap" if self.roles[role] == "android" else "click"
        return {"action": kind, "env": role, "target": {"x": x, "y": y}}

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActionSpace) and (other.roles, other.screen) == (
            self.roles,
            self.screen,
        )

    def __repr__(self) -> str:
        return f"ActionSpace(roles={self.roles})"


class ObservationSpace(spaces.Space):
    """pincer's observations: a dict with the task, the step, feedback on the last actions
    and, per environment role, its images (PNG bytes), marked elements and UI tree text, as
    pincer's agents get them (the checkpoints are in ``info``)."""

    KEYS = ("task", "instruction", "step", "feedback", "views")

    def __init__(self, roles: dict[str, str]):
        super().__init__(shape=None, dtype=None)
        self.roles = dict(roles)

    def contains(self, x: Any) -> bool:
        return (
            isinstance(x, dict)
            and all(k in x for k in self.KEYS)
            and set(x["views"]) == set(self.roles)
        )

    def sample(self, mask: Any = None, probability: Any = None) -> dict:
        raise NotImplementedError("observations come from the environments, not from sampling")

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObservationSpace) and other.roles == self.roles

    def __repr__(self) -> str:
        return f"ObservationSpace(roles={self.roles})"


class PincerEnv(gymnasium.Env):
    """One pincer task (or any of a suite's, chosen at ``reset``) as a Gymnasium environment.

    ``tasks`` is a task file, directory or bundled suite; ``task`` the task episodes run by
    default, ``task_ids`` the tasks ``reset(options={"task": id})`` may switch to (default:
    ``task`` alone if given, else every task; environments are started for the roles they
    need). Without ``sets``, local desktops are
    started for the session and stopped by ``close()`` (``session="wayland"``: headless
    GNOME Shell desktops instead of X11 ones); ``sets="desktop=NAME"`` uses
    registered environments (local desktops, VMs, phones). ``observe`` chooses what
    observations carry: ``marks`` (the Set-of-Marks image and elements), ``screenshot``,
    ``tree``, ``video=2s@5fps``. ``tools=True`` offers the API tools tasks declare (each
    observation's ``tools`` lists them; act with ``{"action": "api_NAME", ...}``); without
    it a tool action is refused as invalid.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        tasks: str = "demo",
        task: Optional[str] = None,
        *,
        task_ids: Optional[list[str]] = None,
        sets: Optional[str] = None,
        observe: str = "marks",
        max_size: Optional[tuple[int, int]] = None,
        size: tuple[int, int] = (1920, 1080),
        session: str = "x11",
        out: Optional[str] = None,
        envs: Optional[str] = None,
        vm: Optional[str] = None,
        vm_memory: Optional[int] = None,
        vm_cpus: int = 2,
        tools: bool = False,
    ):
        super().__init__()
        ids = task_ids if task_ids is not None else ([task] if task is not None else None)
        self.session = Session(
            tasks,
            task_ids=ids,
            sets=sets,
            observe=observe,
            max_size=max_size,
            size=size,
            session=session,
            out=out,
            agent="python:gym",
            envs=envs,
            vm=vm,
            vm_memory=vm_memory,
            vm_cpus=vm_cpus,
            tools=tools,
        )
        self.task_id = task or self.session.task_ids()[0]
        self._screen = size
        self._spaces_for(self.task_id)
        self._completion = 0.0
        self._last: Optional[dict] = None
        self._checkpoints: Optional[list] = None

    def _spaces_for(self, task_id: str) -> None:
        roles = self.session.task(task_id)["roles"]
        self.action_space = ActionSpace(roles, self._screen)
        self.observation_space = ObservationSpace(roles)

    @property
    def out(self) -> str:
        """The run directory: results.jsonl, trajectories, the report."""
        return self.session.out

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        task_id = (options or {}).get("task", self.task_id)
        if task_id != self.task_id:
            self._spaces_for(task_id)  # raises for a task this session does not have
            self.task_id = task_id
        now = self.session.begin(task_id, seed or 0)
        self._last, self._checkpoints = now["observation"], now["checkpoints"]
        self._completion = completion(self._checkpoints)
        return self._last, self._info(self._last, self._checkpoints, None)

    def step(self, action: Any):
        now = self.session.step(action)
        if not now["ended"]:
            obs, marks = now["observation"], now["checkpoints"]
            done = completion(marks)
            reward = done - self._completion
            self._completion, self._last, self._checkpoints = done, obs, marks
            return obs, reward, False, False, self._info(obs, marks, None)
        rec = now["record"]
        # The state after the last action; a run that ended before one was evaluated (an
        # interruption while deciding) keeps the last observation it had.
        if now["observation"] is not None:
            self._last, self._checkpoints = now["observation"], now["checkpoints"]
        done = record_completion(rec)
        reward = done - self._completion
        self._completion = done
        truncated = rec["termination"] in _TRUNCATING
        return self._last, reward, not truncated, truncated, self._info(
            self._last, self._checkpoints, rec
        )

    @staticmethod
    def _info(obs: Optional[dict], checkpoints: Optional[list], record: Optional[dict]) -> dict:
        info: dict[str, Any] = {
            "checkpoints": {
                c["id"]: {"passed": c["passed"], "feedback": c["feedback"]}
                for c in checkpoints or []
            },
            "feedback": (obs or {}).get("feedback", []),
            "completion": completion(checkpoints),
        }
        if record is not None:
            info.update(
                termination=record["termination"],
                detail=record.get("detail"),
                success=record["termination"] == "success",
                completion=record_completion(record),
                record=record,
            )
        return info

    def report(self) -> str:
        """Writes the run directory's HTML and Markdown report; the HTML's path."""
        return self.session.report()

    def close(self) -> None:
        """Aborts a running episode (recorded as aborted) and stops the desktops started."""
        self.session.close()
