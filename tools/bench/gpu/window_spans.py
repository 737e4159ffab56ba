#!/usr/bin/env python3
"""How long the scheduler's launch-probe windows really stayed attached, from
a `scx_express trace --probe-policy scheduler --csv` file: launch hits are
grouped into windows (a gap over 1 s starts a new one); prints each window's
span and hit count, then hits per iteration of a workload if given.

  window_spans.py TRACE.csv [WORKLOAD.jsonl]
"""

import csv
import json
import sys


def main():
    spans, cur = [], None
    hits = {"launch": 0, "sync": 0}
    wl = None
    if len(sys.argv) > 2:
        ev = {}
        for line in open(sys.argv[2]):
            if line.startswith("{"):
                d = json.loads(line)
                ev[d["event"]] = d
        wl = ev
    for row in csv.DictReader(open(sys.argv[1], newline="")):
        ts = int(row["timestamp_ns"])
        ev = row["event_type"]
        if wl and int(row["tid"]) == wl["start"]["tid"] and \
                wl["result"]["t0_ns"] < ts <= wl["result"]["t1_ns"] and ev in hits:
            hits[ev] += 1
        if ev != "launch":
            continue
        if cur and ts - cur[1] < 1_000_000_000:
            cur[1] = ts
            cur[2] += 1
        else:
            cur = [ts, ts, 1]
            spans.append(cur)
    for a, b, n in spans:
        print(json.dumps({"window_start_ns": a, "span_ms": round((b - a) / 1e6, 1), "launch_hits": n}))
    if wl:
        n = wl["result"]["iterations"]
        print(json.dumps({"iterations": n, "launch_hits_per_iter": hits["launch"] / n,
                          "sync_hits_per_iter": hits["sync"] / n}))


if __name__ == "__main__":
    main()
