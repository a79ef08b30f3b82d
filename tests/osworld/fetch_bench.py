"""`pincer osworld fetch` against a loopback stand-in of OSWorld's file host, for
`./run.sh bench`: N tasks, each with a setup file and a gold file of SIZE bytes, served by
Python's threading HTTP server; prints pincer's summary line (files, bytes, throughput).

usage: fetch_bench.py PINCER WORKDIR [N] [SIZE]
"""

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading

pincer, work = sys.argv[1], sys.argv[2]
n = int(sys.argv[3]) if len(sys.argv) > 3 else 20
size = int(sys.argv[4]) if len(sys.argv) > 4 else 5_000_000
shutil.rmtree(work, ignore_errors=True)
served = os.path.join(work, "host")
os.makedirs(served)
for i in range(n):
    for kind in ("setup", "gold"):
        with open(os.path.join(served, f"{kind}-{i}.bin"), "wb") as f:
            f.write(os.urandom(size))


class Quiet(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a, **k):
        super().__init__(*a, directory=served, **k)

    def log_message(self, *a):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
threading.Thread(target=server.serve_forever, daemon=True).start()
host = f"http://127.0.0.1:{server.server_address[1]}"
examples = os.path.join(work, "tasks", "examples", "os")
os.makedirs(examples)
ids = []
for i in range(n):
    task = {
        "id": f"bench-{i}", "instruction": "(fetch bench)",
        "config": [{"type": "download", "parameters": {"files": [
            {"url": f"{host}/setup-{i}.bin", "path": f"/home/user/setup-{i}.bin"}]}}],
        "evaluator": {"func": "compare_text_file",
                      "result": {"type": "vm_file", "path": "/home/user/x", "dest": "x"},
                      "expected": {"type": "cloud_file", "path": f"{host}/gold-{i}.bin",
                                   "dest": f"gold-{i}.bin"}},
    }
    json.dump(task, open(os.path.join(examples, f"bench-{i}.json"), "w"))
    ids.append(f"bench-{i}")
json.dump({"os": ids}, open(os.path.join(work, "tasks", "test_all.json"), "w"))
out = subprocess.run(
    [pincer, "osworld", "fetch", os.path.join(work, "tasks"), "--assets",
     os.path.join(work, "cache"), "--parallel", "4"],
    capture_output=True, text=True, check=True,
)
print(out.stdout.strip())
shutil.rmtree(work, ignore_errors=True)
