#!/usr/bin/env python3
"""Per-hit uprobe cost from tools/bench/gpu/probe_cost output.

  probe_cost_report.py PROBE_COST.jsonl NAME=TRACE.json...

For each trace (its [probes_attached_ns, end_ns]), the median over its
seconds of (probed - plain) ns per call; the seconds outside every trace
are the control (no probe attached).
"""

import json
import statistics
import sys


def main():
    rows = [json.loads(x) for x in open(sys.argv[1]) if x.startswith('{"t_ns"')]
    spans = {}
    for arg in sys.argv[2:]:
        name, path = arg.split("=", 1)
        r = json.load(open(path))
        spans[name] = (r["probes_attached_ns"] or r["start_ns"], r["end_ns"])
    out = {}
    used = set()
    for name, (a, b) in spans.items():
        # A row covers the second before its t_ns: keep whole seconds inside.
        d = [x["probed_ns"] - x["plain_ns"] for x in rows if a + 1e9 <= x["t_ns"] <= b]
        used.update(x["t_ns"] for x in rows if a <= x["t_ns"] <= b + 1e9)
        out[name] = {"seconds": len(d), "cost_ns_median": round(statistics.median(d), 1) if d else None,
                     "cost_ns_min": round(min(d), 1) if d else None,
                     "cost_ns_max": round(max(d), 1) if d else None}
    ctl = [x["probed_ns"] - x["plain_ns"] for x in rows if x["t_ns"] not in used]
    out["no_probe"] = {"seconds": len(ctl), "cost_ns_median": round(statistics.median(ctl), 2) if ctl else None}
    plain = [x["plain_ns"] for x in rows]
    out["plain_call_ns_median"] = round(statistics.median(plain), 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
