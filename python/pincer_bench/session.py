"""``Session``: the extension's session, closed when the interpreter exits if its owner
did not close it, so the desktops it started stop."""

from __future__ import annotations

import atexit
import weakref

from ._pincer import PincerError
from ._pincer import Session as _Session

__all__ = ["Session", "record_completion"]

_OPEN: weakref.WeakSet = weakref.WeakSet()


class Session(_Session):
    """An environment set and a run directory over which Python starts episodes (one at a
    time) and decides each action: what ``PincerEnv`` and ``DesktopEnv`` stand on. Sessions
    still open when the interpreter exits are closed, so their desktops stop."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        _OPEN.add(self)

    def begin(self, task_id: str, seed: int = 0) -> dict:
        """``start``, for callers that need an observation: a task run that ends before
        its first action (a broken setup) raises ``PincerError`` saying why."""
        now = self.start(task_id, seed)
        if now["ended"]:
            rec = now["record"]
            raise PincerError(
                f"task {task_id} ended before its first action: "
                f"{rec['termination']}: {rec.get('detail') or ''}"
            )
        return now


def record_completion(record: dict) -> float:
    """A task run's completion rate: checkpoints passed / checkpoints (0 without any)."""
    return record["passed"] / record["total"] if record["total"] else 0.0


@atexit.register
def _close_open_sessions() -> None:
    for session in list(_OPEN):
        session.close()
