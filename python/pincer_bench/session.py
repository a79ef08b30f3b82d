"""``Session``: the extension's session, closed when the interpreter exits if its owner
did not close it, so the desktops it started stop."""

from __future__ import annotations

import atexit
import weakref

from ._pincer import Session as _Session

__all__ = ["Session"]

_OPEN: weakref.WeakSet = weakref.WeakSet()


class Session(_Session):
    """An environment set and a run directory over which Python starts episodes (one at a
    time) and decides each action: what ``PincerEnv`` and ``DesktopEnv`` stand on. Sessions
    still open when the interpreter exits are closed, so their desktops stop."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        _OPEN.add(self)


@atexit.register
def _close_open_sessions() -> None:
    for session in list(_OPEN):
        session.close()
