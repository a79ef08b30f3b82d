"""pincer from Python: Gymnasium environments over pincer's tasks and environments, Python
agents inside pincer's runner, and an OSWorld-compatible ``DesktopEnv``.

Everything goes through pincer's host library (the ``_pincer`` extension): the same task
runs, evaluator, trajectories and reports as ``pincer run``. Only the observe and action
classes are reachable (and a task's declared API tools with ``tools=True``): an agent sees
observations and sends actions, nothing else.
"""

from __future__ import annotations

import os
from pathlib import Path

_BIN = Path(__file__).resolve().parent / "bin"

# Local desktops are supervised by a `pincer` process: this process is Python, so point the
# library at the binary the wheel carries (a checkout's own build can override it).
if (_BIN / "pincer").is_file():
    os.environ.setdefault("PINCER_EXE", str(_BIN / "pincer"))

from ._pincer import (  # noqa: E402
    InvalidActionError,
    PincerError,
    action_schema,
    check_action,
    run,
)
from .session import Session  # noqa: E402
from .gym import PincerEnv  # noqa: E402

__all__ = [
    "InvalidActionError",
    "PincerEnv",
    "PincerError",
    "Session",
    "action_schema",
    "check_action",
    "run",
]
