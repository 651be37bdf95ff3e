#!/usr/bin/env python3
"""Per-op handoffs and spans of one traced overlap step (`megaops trace` JSON).

For each op kind (the op name without its "layer N" prefix), medians over the layers of:
  handoff  = first CTA of the op starts working - last CTA of the previous op finished
  span     = first work start to last work end of the op
  CTA work = median work time of one CTA
  early    = share of the op's CTAs that started (began waiting; without a wait record, began
             working) before the previous op's last CTA finished
  late     = median and last start of the other CTAs after that moment
and the step's totals. This is the table in docs/overlap-design.md.

  python3 scripts/trace_report.py trace.json [--json out.json]
  python3 scripts/trace_report.py selftest
"""
import argparse
import collections
import gzip
import json
import statistics
import sys


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        d = json.load(f)
    if isinstance(d, dict):
        if "traceEvents" not in d:
            raise ValueError("not a Chrome trace: no traceEvents")
        return d["traceEvents"]
    return d


def report(events):
    ops = collections.defaultdict(lambda: {"work_start": [], "work_end": [], "cta_work": []})
    names = {}
    starts = collections.defaultdict(dict)  # op -> CTA -> its first record's start
    for e in events:
        if e.get("ph") != "X" or "args" not in e:
            continue
        i = e["args"]["op_index"]
        names[i] = e["name"]
        cta = e["args"].get("cta")
        starts[i][cta] = min(starts[i].get(cta, e["ts"]), e["ts"])
        if e["cat"] == "work":
            ops[i]["work_start"].append(e["ts"])
            ops[i]["work_end"].append(e["ts"] + e["dur"])
            ops[i]["cta_work"].append(e["dur"])
    rows = []
    for i in sorted(ops):
        o = ops[i]
        if not o["work_start"]:
            continue
        rows.append({"index": i, "name": names[i], "first_start": min(o["work_start"]),
                     "last_end": max(o["work_end"]), "ctas": len(o["work_start"]),
                     "cta_work": statistics.median(o["cta_work"]),
                     "starts": list(starts[i].values())})
    if not rows:
        raise ValueError("no work records in the trace")
    kinds = collections.OrderedDict()
    for prev, r in zip(rows, rows[1:]):
        kind = r["name"].split(" ", 2)[-1] if r["name"].startswith("layer ") else r["name"]
        late = [x - prev["last_end"] for x in r["starts"] if x >= prev["last_end"]]
        kinds.setdefault(kind, []).append({
            "handoff": r["first_start"] - prev["last_end"],
            "span": r["last_end"] - r["first_start"],
            "cta_work": r["cta_work"], "ctas": r["ctas"],
            "early": 1.0 - len(late) / len(r["starts"]),
            "late_median": statistics.median(late) if late else 0.0,
            "late_last": max(late) if late else 0.0})
    table = []
    for kind, v in kinds.items():
        table.append({"op": kind, "count": len(v),
                      "handoff_us": statistics.median(x["handoff"] for x in v),
                      "span_us": statistics.median(x["span"] for x in v),
                      "cta_work_us": statistics.median(x["cta_work"] for x in v),
                      "ctas": statistics.median(x["ctas"] for x in v),
                      "early": statistics.median(x["early"] for x in v),
                      "late_median_us": statistics.median(x["late_median"] for x in v),
                      "late_last_us": statistics.median(x["late_last"] for x in v),
                      "handoff_total_us": sum(x["handoff"] for x in v),
                      "span_total_us": sum(x["span"] for x in v)})
    return {"ops": table, "step_us": rows[-1]["last_end"] - rows[0]["first_start"],
            "handoff_total_us": sum(t["handoff_total_us"] for t in table),
            "span_total_us": sum(t["span_total_us"] for t in table)}


def selftest():
    """Two layers of two ops with known gaps: the medians and totals must come out exactly."""
    ev = []
    t = 0.0
    for layer in range(2):
        for op, (gap, work) in enumerate([(2.0, 3.0), (1.0, 5.0)]):
            t += gap
            for cta in range(2):
                args = {"op_index": 2 * layer + op, "cta": cta}
                ev.append({"ph": "X", "cat": "work", "name": f"layer {layer} op{op}",
                           "ts": t, "dur": work - cta, "args": args})
            # CTA 0 began waiting 4 us before its work (before the previous op ended); CTA 1
            # has no wait record: it starts with its work.
            ev.append({"ph": "X", "cat": "wait", "name": f"layer {layer} op{op}", "ts": t - 4.0,
                       "dur": 4.0, "args": {"op_index": 2 * layer + op, "cta": 0}})
            t += work
    r = report(ev)
    got = {x["op"]: (x["count"], x["handoff_us"], x["span_us"], x["ctas"], x["early"],
                     x["late_median_us"], x["late_last_us"]) for x in r["ops"]}
    # op0 of layer 0 has no predecessor; op1 follows op0 by 1 us, op0 of layer 1 follows by 2 us;
    # in each, CTA 0 started early and CTA 1 as late as the handoff.
    assert got == {"op1": (2, 1.0, 5.0, 2, 0.5, 1.0, 1.0),
                   "op0": (1, 2.0, 3.0, 2, 0.5, 2.0, 2.0)}, got
    assert r["step_us"] == t - 2.0 and r["handoff_total_us"] == 4.0, r
    print("trace_report.py selftest: ok")


def main():
    if sys.argv[1:] == ["selftest"]:
        selftest()
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--json", help="also write the table here")
    a = ap.parse_args()
    try:
        r = report(load(a.trace))
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"trace_report.py: {a.trace}: {e}")
    print(f"{'op':28s} {'n':>4s} {'handoff us':>11s} {'span us':>9s} {'CTA work us':>12s} "
          f"{'CTAs':>6s} {'early':>6s} {'late us (median, last)':>23s}")
    for t in r["ops"]:
        print(f"{t['op']:28s} {t['count']:4d} {t['handoff_us']:11.2f} {t['span_us']:9.2f} "
              f"{t['cta_work_us']:12.2f} {t['ctas']:6.0f} {t['early']:6.2f} "
              f"{t['late_median_us']:11.2f} {t['late_last_us']:11.2f}")
    print(f"step {r['step_us']:.1f} us: handoffs {r['handoff_total_us']:.1f} us, "
          f"op spans {r['span_total_us']:.1f} us")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
