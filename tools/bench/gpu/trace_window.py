#!/usr/bin/env python3
"""Launches per iteration seen by `scx_express trace --csv`, per workload.

  trace_window.py TRACE.csv WORKLOAD.jsonl...

For each workload's JSON lines (tools/bench/gpu/common.py), takes its launcher
thread and timed window, counts that thread's CSV rows inside the window
(launches not nested in another CUDA call, all launch hits, syncs, context
switches) and compares launches per iteration with the profiler's count.
Prints one JSON object per workload.
"""

import csv
import json
import sys
from collections import Counter


def load(path):
    out = {}
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            d = json.loads(line)
            out[d.get("event")] = d
    return out


def main():
    csv_path, jobs = sys.argv[1], sys.argv[2:]
    wl = []
    for j in jobs:
        d = load(j)
        if "result" not in d:
            print(json.dumps({"workload": j, "error": "no result line"}))
            continue
        wl.append((j, d, Counter(), Counter()))
    with open(csv_path, newline="") as f:
        for row in csv.DictReader(f):
            ts = int(row["timestamp_ns"])
            tid = int(row["tid"])
            for _, d, c, sym in wl:
                r = d["result"]
                if tid != d["start"]["tid"] or not (r["t0_ns"] < ts <= r["t1_ns"]):
                    continue
                ev = row["event_type"]
                c[ev] += 1
                if ev == "launch":
                    sym[(row["detail"], row["nested"])] += 1
                    if row["nested"] == "0":
                        c["launch_calls"] += 1
                if ev == "switch_out":
                    c["switch_" + row["detail"]] += 1
    for name, d, c, sym in wl:
        r = d["result"]
        n = r["iterations"]
        prof = d.get("profile", {})
        per = c["launch_calls"] / n if n else 0
        k = prof.get("kernels_per_iter")
        api = prof.get("launch_api_per_iter")
        print(json.dumps({
            "workload": name,
            "tid": d["start"]["tid"],
            "iterations": n,
            "per_s": round(r["per_s"], 2),
            "trace_launches_per_iter": round(per, 2),
            "trace_launch_hits_per_iter": round(c["launch"] / n, 2) if n else 0,
            "trace_syncs_per_iter": round(c["sync"] / n, 2) if n else 0,
            "profiler_kernels_per_iter": k,
            "profiler_launch_api_per_iter": api,
            "profiler_launch_apis": prof.get("launch_apis"),
            "ratio_to_profiler_api": round(per / api, 4) if api else None,
            "ratio_to_profiler_kernels": round(per / k, 4) if k else None,
            "switches": {x: v for x, v in c.items() if x.startswith("switch")},
            "launch_symbols": {f"{s}{'' if nz == '0' else ' (nested)'}": v
                               for (s, nz), v in sym.most_common()},
        }))


if __name__ == "__main__":
    main()
