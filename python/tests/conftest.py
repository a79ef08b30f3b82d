"""Shared set-up: every test's desktops, envs file and runs live in a temporary state
directory, never in the user's. The tests drive real local desktops (Xvfb, D-Bus, AT-SPI,
real apps) through the installed pincer-bench wheel."""

from __future__ import annotations

import os
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


def completion(record: dict) -> float:
    """A record's completion rate, as the report counts it."""
    return record["passed"] / record["total"]
