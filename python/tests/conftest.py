"""Shared set-up: every test's desktops, envs file and runs live in a temporary state
directory, never in the user's. The tests drive real local desktops (Xvfb, D-Bus, AT-SPI,
real apps) through the installed pincer-bench wheel."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def _isolated_state(tmp_path_factory: pytest.TempPathFactory) -> None:
    state = tmp_path_factory.mktemp("pincer-state")
    os.environ["PINCER_STATE_DIR"] = str(state)
    os.environ["PINCER_ENVS"] = str(state / "envs.toml")


@pytest.fixture(scope="session")
def pincer_cli() -> Path:
    """The `pincer` command the installed package puts next to this Python."""
    cli = Path(sys.executable).parent / "pincer"
    assert cli.is_file(), f"{cli} is missing: install the pincer-bench wheel into this venv"
    return cli


def python_as_in_a_terminal(script: str) -> subprocess.Popen:
    """`python -c script` with its stdout piped, started as a terminal starts it: with
    SIGINT at its default, so Python turns Ctrl-C into KeyboardInterrupt. A shell without
    job control (CI started in the background) starts children with SIGINT ignored, which
    Python keeps, and a test sending SIGINT would then wait on a child that never sees it."""
    return subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
