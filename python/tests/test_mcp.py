"""`pincer mcp` driven by the official Python MCP SDK as a real client over stdio."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

TASK = "terminal-make-project"


def server(cli: Path, out: Path, *extra: str) -> StdioServerParameters:
    # The client passes on only a few variables by itself: the isolated state goes too.
    env = {k: os.environ[k] for k in ("PATH", "HOME", "PINCER_STATE_DIR", "PINCER_ENVS")}
    return StdioServerParameters(
        command=str(cli),
        args=["mcp", "--tasks", "demo", "--task", TASK, "--out", str(out), *extra],
        env=env,
    )


def png_size(data: bytes) -> tuple[int, int]:
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    return struct.unpack(">II", data[16:24])


def text(result) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


async def solve(cli: Path, out: Path) -> dict:
    async with stdio_client(server(cli, out, "--allow-actions")) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            tools = {t.name: t for t in (await s.list_tools()).tools}
            seen = {"tools": sorted(tools)}
            assert tools["type"].input_schema["required"] == ["text"]
            shot = await s.call_tool("screenshot", {})
            assert not shot.is_error
            (image,) = [c for c in shot.content if c.type == "image"]
            raw = base64.b64decode(image.data)
            seen["shot"] = (image.mime_type, len(raw), png_size(raw) if image.mime_type == "image/png" else None)
            seen["list"] = text(await s.call_tool("list_tasks", {}))
            seen["start"] = text(await s.call_tool("start_task", {"task": TASK}))
            # A start that cannot happen leaves the running task alone.
            seen["typo"] = await s.call_tool("start_task", {"task": "no-such-task"})
            marks = await s.call_tool("observe", {})
            seen["observe"] = text(marks)
            seen["bad"] = await s.call_tool("click", {"target": {"element": 99999}})
            typed = await s.call_tool(
                "type", {"text": "mkdir -p ~/projects/pincer && echo fast > ~/projects/pincer/README\n"}
            )
            seen["typed"] = (typed.is_error, text(typed))
            # pincer ends a task run once every checkpoint holds; until then, wait and look.
            for _ in range(40):  # a loaded machine's terminal takes its time
                status = text(await s.call_tool("task_status", {}))
                if "ended" in status:
                    break
                await s.call_tool("wait", {"seconds": 0.3})
            seen["status"] = status
            seen["again"] = await s.call_tool("finish_task", {"outcome": "complete"})
            return seen


def test_an_mcp_client_is_a_scored_agent(pincer_cli: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    seen = asyncio.run(solve(pincer_cli, out))
    assert {"screenshot", "observe", "ui_tree", "list_tasks", "start_task", "task_status",
            "finish_task", "click", "type", "key", "scroll", "drag"} <= set(seen["tools"])
    # No setup, exec, file or shell tools, ever; the ending actions go through finish_task.
    assert not {"exec", "launch", "file", "shell", "setup", "complete"} & set(seen["tools"])
    mime, size, dims = seen["shot"]
    assert size <= 1 << 20
    if dims:
        assert max(dims) <= 1568
    assert "image 1568x882" in seen["observe"] and "terminal" in seen["observe"].lower()
    assert "checkpoints" not in seen["observe"]  # the grader is task_status's, on request
    assert seen["typo"].is_error and "no task 'no-such-task'" in text(seen["typo"])
    assert TASK in seen["list"] and TASK in seen["start"]
    assert seen["typed"][0] is False
    # An element that is not there is the agent's mistake, told back, not a failed call.
    assert seen["bad"].is_error is False and "99999" in text(seen["bad"])
    assert "ended: success" in seen["status"] and "passed 2/2" in seen["status"]
    assert seen["again"].is_error and "no task is running" in text(seen["again"])

    (record,) = [json.loads(l) for l in (out / "results.jsonl").read_text().splitlines()]
    assert record["task"] == TASK and record["termination"] == "success" and record["agent"] == "mcp"
    calls = [json.loads(l) for l in (out / "mcp.jsonl").read_text().splitlines()]
    assert [c["tool"] for c in calls][:5] == ["screenshot", "list_tasks", "start_task", "start_task", "observe"]
    assert calls[-1]["tool"] == "finish_task" and calls[-1]["ok"] is False
    assert sum(not c["ok"] for c in calls) == 2  # the typo and finishing twice
    assert calls[3]["tool"] == "start_task" and not calls[3]["ok"] and calls[3]["task"] == TASK
    assert (out / "report.html").is_file()


async def observe_only(cli: Path, out: Path) -> tuple[list[str], object, object, object]:
    async with stdio_client(server(cli, out)) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            names = [t.name for t in (await s.list_tools()).tools]
            refused = await s.call_tool("type", {"text": "rm -rf ~\n"})
            tree = await s.call_tool("ui_tree", {})
            await s.call_tool("start_task", {"task": TASK})
            gave_up = await s.call_tool("finish_task", {"outcome": "answer", "answer": "42"})
            return names, refused, tree, gave_up


def test_without_the_flag_it_only_observes(pincer_cli: Path, tmp_path: Path) -> None:
    names, refused, tree, gave_up = asyncio.run(observe_only(pincer_cli, tmp_path / "run"))
    assert "screenshot" in names and "type" not in names and "click" not in names
    assert refused.is_error and "--allow-actions" in text(refused)
    assert not tree.is_error and text(tree).strip()
    # A task can still be started and ended (an answer ends it too), and is scored on what
    # it finds: not done.
    assert "ended: false-completion" in text(gave_up) and "passed 0/2" in text(gave_up)


def desktops(cli: Path) -> str:
    return subprocess.run([str(cli), "desktop", "list"], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.parametrize("how", ["stdin closed", "SIGTERM", "SIGINT"])
def test_the_desktop_goes_with_the_server(pincer_cli: Path, tmp_path: Path, how: str) -> None:
    """However a client stops the server, the local desktop it started is stopped."""
    server_proc = subprocess.Popen(
        [str(pincer_cli), "mcp", "--task", TASK, "--out", str(tmp_path / "run")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while "run" not in desktops(pincer_cli):
            assert server_proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        if how == "stdin closed":
            server_proc.stdin.close()
        else:
            server_proc.send_signal(signal.SIGTERM if how == "SIGTERM" else signal.SIGINT)
        assert server_proc.wait(timeout=60) is not None
    finally:
        server_proc.kill()
    assert "no local desktops are up" in desktops(pincer_cli)


async def with_video(cli: Path, out: Path) -> dict:
    spec = "screenshot,marks,tree,video=1s@5fps"
    async with stdio_client(server(cli, out, "--allow-actions", "--observe", spec)) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            seen = {"before": await s.call_tool("screenshot", {})}
            await s.call_tool("start_task", {"task": TASK})
            await s.call_tool("type", {"text": "echo the screen moves\n"})
            seen["shot"] = await s.call_tool("screenshot", {})
            seen["observe"] = await s.call_tool("observe", {})
            return seen


def frames(result) -> list[tuple[int, bytes]]:
    """The captioned frames after a tool's first image: (age in ms, PNG)."""
    blocks = result.content
    first = next(i for i, c in enumerate(blocks) if c.type == "image")
    out = []
    for caption, image in zip(blocks[first + 1::2], blocks[first + 2::2]):
        assert caption.type == "text" and image.type == "image"
        ago = int(caption.text.split(" as it was ")[1].split(" ms ")[0])
        out.append((ago, base64.b64decode(image.data)))
    return out


def test_observations_carry_the_screens_last_moments(pincer_cli: Path, tmp_path: Path) -> None:
    seen = asyncio.run(with_video(pincer_cli, tmp_path / "run"))
    for tool in ("shot", "observe"):
        got = frames(seen[tool])
        assert got, f"{tool}: no frames in {[c.type for c in seen[tool].content]}"
        assert all(0 <= ago <= 1000 and png.startswith(b"\x89PNG") for ago, png in got)
        assert [ago for ago, _ in got] == sorted((ago for ago, _ in got), reverse=True)  # oldest first
    # Outside a task there is no stream to sample: the screenshot alone.
    assert [c.type for c in seen["before"].content] == ["text", "image"]


CALENDAR = "example-calendar-dentist"
BOOK = {"title": "Dentist", "date": "2026-12-03", "hour": 9}


def calendar_server(cli: Path, out: Path, *extra: str) -> StdioServerParameters:
    env = {k: os.environ[k] for k in ("PATH", "HOME", "PINCER_STATE_DIR", "PINCER_ENVS")}
    return StdioServerParameters(
        command=str(cli),
        args=["mcp", "--tasks", "examples", "--task", CALENDAR, "--allow-actions", "--out", str(out), *extra],
        env=env,
    )


async def book(cli: Path, out: Path, *extra: str) -> dict:
    async with stdio_client(calendar_server(cli, out, *extra)) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            seen = {"tools": [t.name for t in (await s.list_tools()).tools]}
            seen["early"] = await s.call_tool("api", {"name": "add_event", "arguments": BOOK})
            seen["start"] = text(await s.call_tool("start_task", {"task": CALENDAR}))
            seen["call"] = await s.call_tool("api", {"name": "add_event", "arguments": BOOK})
            for _ in range(20):
                status = text(await s.call_tool("task_status", {}))
                if "ended" in status:
                    break
                await s.call_tool("wait", {"seconds": 0.3})
            seen["status"] = status
            if "ended" not in status:
                await s.call_tool("finish_task", {"outcome": "infeasible"})
            return seen


@pytest.mark.skipif(not (shutil.which("radicale") and shutil.which("bwrap")),
                    reason="needs Debian's radicale and bubblewrap")
def test_with_tools_a_client_books_through_the_api_tool(pincer_cli: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    seen = asyncio.run(book(pincer_cli, out, "--tools"))
    assert "api" in seen["tools"]
    assert seen["early"].is_error and "start one with start_task" in text(seen["early"])
    assert "API tools" in seen["start"] and "add_event:" in seen["start"] and '"hour"' in seen["start"]
    assert not seen["call"].is_error, text(seen["call"])
    assert "tool add_event succeeded" in text(seen["call"])
    assert "ended: success" in seen["status"], seen["status"]
    (record,) = [json.loads(l) for l in (out / "results.jsonl").read_text().splitlines()]
    assert record["termination"] == "success" and record["tool_calls"] == 1


@pytest.mark.skipif(not (shutil.which("radicale") and shutil.which("bwrap")),
                    reason="needs Debian's radicale and bubblewrap")
def test_without_tools_the_api_tool_is_refused(pincer_cli: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    seen = asyncio.run(book(pincer_cli, out))
    assert "api" not in seen["tools"]
    assert seen["call"].is_error and "--tools" in text(seen["call"])
    assert "API tools" not in seen["start"]
    assert "ended: success" not in seen["status"]
    (record,) = [json.loads(l) for l in (out / "results.jsonl").read_text().splitlines()]
    assert record["tool_calls"] == 0 and record["termination"] != "success"
