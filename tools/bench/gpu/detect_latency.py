#!/usr/bin/env python3
"""Was each workload's launcher caught by `scx_express trace`, and how long
after its first CUDA launch was it classified?

  detect_latency.py TRACE.json WORKLOAD.jsonl...

The workload prints `first_cuda_launch` (CLOCK_MONOTONIC ns) just before its
first kernel-launching call; the trace's JSON report gives, per thread, when
a probe hit classified it (`classified_ns`, same clock). With
`--probe-policy scheduler` that is the scheduler's own detection.
"""

import json
import sys


def main():
    rep = json.load(open(sys.argv[1]))
    by_tid = {t["tid"]: t for t in rep["threads"]}
    for path in sys.argv[2:]:
        ev = {}
        for line in open(path):
            if line.startswith("{"):
                d = json.loads(line)
                ev[d["event"]] = d
        tid = ev["start"]["tid"]
        t = by_tid.get(tid)
        first = ev.get("first_cuda_launch", {}).get("t_ns")
        out = {"workload": path, "tid": tid, "caught": t is not None}
        if t:
            out.update(class_=t["class"], source=t["source"], launches=t["launches"],
                       syncs=t["syncs"], switches=t["switches"])
            if first and t.get("classified_ns"):
                out["first_launch_to_classified_ms"] = round((t["classified_ns"] - first) / 1e6, 2)
            if first and t.get("first_hit_ns"):
                out["first_launch_to_first_hit_ms"] = round((t["first_hit_ns"] - first) / 1e6, 2)
            if t.get("detect_ms") is not None:
                out["replayed_detect_ms"] = t["detect_ms"]
        print(json.dumps(out).replace('"class_"', '"class"'))


if __name__ == "__main__":
    main()
