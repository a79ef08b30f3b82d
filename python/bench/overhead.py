"""What the Python interface and the MCP server add per step, measured on a local desktop.

The runner times every step of every task run (``steps.jsonl``): ``agent_ms`` is how long
it waited for the decision. For pincer's native agents that is the agent's own work; for a
Python agent whose policy does nothing, it is what crossing into Python and back costs:
handing the observation over (images as bytes, the rest as dicts), waking Python, reading
its action back. So the overhead of the Python interface over the native runner is the
Python agents' ``agent_ms`` minus the native trivial agent's, step for step.

Also measured: the round trip of the MCP ``screenshot`` tool through the official Python
SDK over stdio, which a client pays for every look at the screen.

Usage: python overhead.py [STEPS]   (run by ./run.sh bench with the release wheel)
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pincer_bench as pb

TASK = "terminal-make-project"
SHIFT = {"action": "key", "key": "shift"}


def agent_ms(run_dir: Path) -> list[float]:
    """Every step's wait for the decision in a run directory, in milliseconds."""
    out = []
    for steps in run_dir.glob("tasks/*/steps.jsonl"):
        for line in steps.read_text().splitlines():
            out.append(json.loads(line)["timing"]["agent_ms"])
    return out


def quantiles(xs: list[float]) -> str:
    xs = sorted(xs)
    p = lambda q: xs[min(len(xs) - 1, int(q * len(xs)))]  # noqa: E731
    return f"n={len(xs):4d}  p50 {p(0.5):7.3f} ms  p95 {p(0.95):7.3f} ms  max {xs[-1]:7.3f} ms"


def gym(root: Path, steps: int) -> tuple[list[float], list[float]]:
    """A do-nothing policy through PincerEnv: the runner's waits and Python's step() walls."""
    env = pb.PincerEnv("demo", TASK, out=str(root / "gym"))
    walls = []
    try:
        done = steps
        while done > 0:
            env.reset()
            truncated = terminated = False
            while not (terminated or truncated) and done > 0:
                t = time.perf_counter()
                _, _, terminated, truncated, _ = env.step(SHIFT)
                walls.append((time.perf_counter() - t) * 1000)
                done -= 1
    finally:
        env.close()
    return agent_ms(root / "gym"), walls


def callable_agent(root: Path, steps: int) -> list[float]:
    """A do-nothing Python callable in pincer's runner, to the task's step limit."""
    episodes = max(1, steps // 15)
    pb.run("demo", lambda obs: SHIFT, task_ids=[TASK], repeat=episodes,
           out=str(root / "callable"), report=False)
    return agent_ms(root / "callable")


def native(root: Path, pincer: str) -> list[float]:
    """pincer's own oracle agent, which decides without a model: the native baseline."""
    subprocess.run(
        [pincer, "run", "--tasks", "demo", "--task", TASK, "--agent", "oracle", "--repeat", "10",
         "--out", str(root / "native"), "--no-report"],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    return agent_ms(root / "native")


async def mcp_screenshots(pincer: str, root: Path, n: int) -> tuple[list[float], list[float]]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    env = {k: os.environ[k] for k in ("PATH", "HOME", "PINCER_STATE_DIR", "PINCER_ENVS") if k in os.environ}
    params = StdioServerParameters(
        command=pincer, args=["mcp", "--task", TASK, "--out", str(root / "mcp")], env=env
    )
    walls = []
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            await s.call_tool("start_task", {"task": TASK})
            for _ in range(3):
                await s.call_tool("screenshot", {})
            for _ in range(n):
                t = time.perf_counter()
                r = await s.call_tool("screenshot", {})
                walls.append((time.perf_counter() - t) * 1000)
                assert not r.is_error
            # A fresh look each time, outside a task: capture and encode included.
            await s.call_tool("finish_task", {"outcome": "infeasible"})
            fresh = []
            for _ in range(n // 2):
                t = time.perf_counter()
                await s.call_tool("screenshot", {})
                fresh.append((time.perf_counter() - t) * 1000)
    return walls, fresh


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 150
    pincer = str(Path(sys.executable).parent / "pincer")
    with tempfile.TemporaryDirectory(prefix="pincer-overhead-") as tmp:
        root = Path(tmp)
        os.environ.setdefault("PINCER_STATE_DIR", str(root / "state"))
        os.environ.setdefault("PINCER_ENVS", str(root / "state" / "envs.toml"))
        base = native(root, pincer)
        waits, walls = gym(root, steps)
        called = callable_agent(root, steps)
        stored, fresh = asyncio.run(mcp_screenshots(pincer, root, 40))
    med = statistics.median(base)
    print(f"native oracle agent, agent_ms        {quantiles(base)}")
    print(f"PincerEnv step loop, agent_ms        {quantiles(waits)}")
    print(f"run(agent=callable), agent_ms        {quantiles(called)}")
    print(f"PincerEnv.step() wall (act+evaluate) {quantiles(walls)}")
    print(f"per-step overhead over native, p50: PincerEnv {statistics.median(waits) - med:.3f} ms, "
          f"run(agent=callable) {statistics.median(called) - med:.3f} ms")
    print(f"MCP screenshot round trip, in a task {quantiles(stored)}")
    print(f"MCP screenshot round trip, fresh     {quantiles(fresh)}")


if __name__ == "__main__":
    main()
