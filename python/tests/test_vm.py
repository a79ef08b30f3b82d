"""PincerEnv on QEMU VMs of the image CI builds (debian-12-minimal): every episode starts
from the image's golden state. QEMU runs with TCG on machines without hardware
virtualization, so this is the slow test of the package."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pincer_bench as pb

IMAGE = "debian-12-minimal"

TASK = {
    "id": "vm-mark",
    "instruction": "Run `touch ~/mark` in the terminal.",
    "envs": {"desktop": {"platform": "linux"}},
    "setup": {"desktop": [
        {"do": "launch", "argv": ["xfce4-terminal", "--disable-server",
                                  "--default-working-directory=/tmp"]},
        {"do": "wait_window", "title_contains": "Terminal", "timeout_ms": 120000},
    ]},
    "checkpoints": [
        {"id": "mark", "env": "desktop", "check": "file_exists", "args": {"path": "~/mark"}},
    ],
    "limits": {"max_steps": 20, "max_seconds": 600},
}


def test_episodes_on_a_vm_start_from_its_golden_state(tmp_path: Path, pincer_cli: Path) -> None:
    # Built once and cached by recipe (the Rust tests have built it before these run).
    built = subprocess.run([str(pincer_cli), "image", "build", IMAGE], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "vm-mark.json").write_text(json.dumps(TASK))

    env = pb.PincerEnv(str(tasks), "vm-mark", vm=IMAGE, out=str(tmp_path / "run"))
    try:
        obs, info = env.reset()
        assert obs["views"]["desktop"]["marked"].startswith(b"\x89PNG")
        obs, reward, terminated, truncated, info = env.step(
            {"action": "type", "text": "touch ~/mark\n"})
        for _ in range(60):
            if terminated or truncated:
                break
            obs, r, terminated, truncated, info = env.step({"action": "wait", "seconds": 1})
            reward += r
        assert terminated and info["success"] and reward == 1.0
        # The next episode starts on a VM restored to its golden state: the mark is gone
        # (were it there, the initial check would find the task done and refuse it).
        obs, info = env.reset()
        assert info["checkpoints"]["mark"]["passed"] is False
    finally:
        env.close()
    vms = subprocess.run([str(pincer_cli), "vm", "list"], capture_output=True, text=True)
    assert vms.returncode == 0 and "run" not in vms.stdout


def test_pincer_mcp_serves_a_vm(tmp_path: Path, pincer_cli: Path) -> None:
    import asyncio
    import os

    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "vm-mark.json").write_text(json.dumps(TASK))
    env = {k: os.environ[k] for k in ("PATH", "HOME", "PINCER_STATE_DIR", "PINCER_ENVS")}
    params = StdioServerParameters(
        command=str(pincer_cli),
        args=["mcp", "--tasks", str(tasks), "--vm", IMAGE, "--allow-actions",
              "--out", str(tmp_path / "run")],
        env=env,
    )

    async def session() -> tuple[str, str]:
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                await s.call_tool("start_task", {"task": "vm-mark"})
                await s.call_tool("type", {"text": "touch ~/mark\n"})
                status = ""
                for _ in range(60):
                    status = (await s.call_tool("task_status", {})).content[0].text
                    if "ended" in status:
                        break
                    await s.call_tool("wait", {"seconds": 1})
                listed = subprocess.run([str(pincer_cli), "vm", "list"], capture_output=True, text=True)
                return status, listed.stdout

    status, during = asyncio.run(session())
    assert "ended: success" in status
    assert "run" in during  # the session's VM, while it served
    after = subprocess.run([str(pincer_cli), "vm", "list"], capture_output=True, text=True)
    assert "run" not in after.stdout
