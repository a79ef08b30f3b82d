"""Prints what a campaign's results.jsonl says: task runs, how many scored 1.0, above 0 and
0, the median and p90 wall time per task run (reset, setup, agent and scoring), and the
task runs that did not score 1.0 with why. Usage: campaign_stats.py RESULTS_JSONL"""
import json
import statistics
import sys

records = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
if not records:
    sys.exit(f"{sys.argv[1]}: no task runs")
scores = [r.get("score") for r in records]
walls = sorted(r["wall_ms"] / 1000 for r in records if "wall_ms" in r)
full = sum(1 for s in scores if s == 1.0)
zero = sum(1 for s in scores if s == 0.0)
print(
    f"{len(records)} task runs: {full} scored 1.0, {len(records) - full - zero} between, "
    f"{zero} scored 0; wall per task run median {statistics.median(walls):.1f} s, "
    f"p90 {walls[int(0.9 * (len(walls) - 1))]:.1f} s, max {walls[-1]:.1f} s"
)
for r in records:
    if r.get("score") != 1.0:
        why = (r.get("detail") or "").splitlines()[0][:160] if r.get("detail") else ""
        print(f"  {r['task']}: {r['termination']} score {r.get('score')} ({why})")
