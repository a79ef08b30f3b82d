"""A desktop a Python process starts for its own use ends with that process, also when the
process is SIGKILLed and cannot clean up: its supervisor stops every process of it, frees
its display and port, and takes it out of the envs file."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

TASK = "terminal-make-project"


class Footprint:
    """What a running desktop holds: its processes (the supervisor's session, and any
    process carrying its PINCER_DESKTOP_ID), its X display and its agent's UDP port."""

    def __init__(self, state: dict) -> None:
        self.name = state["name"]
        supervisor = state["supervisor_pid"]
        marker = f"PINCER_DESKTOP_ID={self.name}-{supervisor}".encode()
        self.processes = {  # pid: (start time, name)
            pid: (stat[19], comm)
            for pid, comm, stat in _processes()
            if int(stat[3]) == supervisor or marker in _environ(pid)
        }
        assert supervisor in self.processes, f"the supervisor of {self.name} is not running"
        self.display = int(state["display"].lstrip(":"))
        host, port = state["agent_addr"].rsplit(":", 1)
        self.agent = (host, int(port))

    def left(self) -> list[str]:
        left = [
            f"process {pid} ({comm})"
            for pid, (started, comm) in self.processes.items()
            if (stat := _stat(pid)) is not None and stat[19] == started and stat[0] not in "ZX"
        ]
        with socket.socket(socket.AF_UNIX) as x:
            try:
                x.connect(f"/tmp/.X11-unix/X{self.display}")
                left.append(f"an X server on :{self.display}")
            except OSError:
                pass
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            try:
                udp.bind(self.agent)
            except OSError:
                left.append(f"a socket on the agent's port {self.agent}")
        return left


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the name: state, ppid, pgrp, session, ..."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def _environ(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def _processes():
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            pid = int(entry.name)
            stat = _stat(pid)
            try:
                comm = (entry / "comm").read_text().strip()
            except OSError:
                continue
            if stat is not None:
                yield pid, comm, stat


def registered() -> set[str]:
    envs = Path(os.environ["PINCER_ENVS"])
    return set(tomllib.loads(envs.read_text()).get("envs", {})) if envs.exists() else set()


@pytest.mark.parametrize("forked", [False, True], ids=["alone", "with a forked child alive"])
def test_a_sigkilled_process_takes_its_desktop_with_it(
    tmp_path: Path, pincer_cli: Path, forked: bool
) -> None:
    """A forked child (multiprocessing, a vector env's workers) does not keep its parent's
    desktop alive: it drops the parent's end of the lifeline when it is forked."""
    script = (
        "import os, time\n"
        "import pincer_bench as pb\n"
        f"env = pb.PincerEnv('demo', {TASK!r}, out={str(tmp_path / 'run')!r})\n"
        "env.reset()\n"
        f"child = os.fork() if {forked} else 0\n"
        f"if {forked} and child == 0:\n"
        "    time.sleep(120)\n"
        "    os._exit(0)\n"
        "print(os.getpid(), child, flush=True)\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child = 0
    try:
        pid, child = map(int, proc.stdout.readline().split())
        assert pid == proc.pid
        name = f"run{pid % 100_000}-s0-desktop"
        state_file = Path(os.environ["PINCER_STATE_DIR"]) / "desktops" / name / "desktop.json"
        desktop = Footprint(json.loads(state_file.read_text()))
        assert len(desktop.processes) >= 4, desktop.processes  # supervisor, Xvfb, D-Bus, agent
        assert name in registered()

        proc.send_signal(signal.SIGKILL)  # no atexit, no close(), no Drop
        proc.wait(timeout=10)
        deadline = time.monotonic() + 20
        while (left := desktop.left()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left, f"{name} left {left}"
        assert name not in registered()
        assert not state_file.exists()
        listed = subprocess.run([str(pincer_cli), "desktop", "list"], capture_output=True,
                                text=True, check=True)
        assert name not in listed.stdout
        if forked:
            assert _stat(child) is not None, "the forked child still runs"
    finally:
        proc.kill()
        if child:
            os.kill(child, signal.SIGKILL)
