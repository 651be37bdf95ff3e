#!/usr/bin/env python3
"""Renders a `megaops trace` Chrome-trace JSON as a PNG timeline.

One row per (SM, concurrent CTA slot), time on the x axis in microseconds; a CTA's work is a bar
coloured by op kind (the op name without its "layer N" prefix), its wait for producers a grey bar
before it. Overlapping ops show up as bars of different colours at the same time on different rows.

  python3 scripts/render_trace.py trace.json docs/trace-llama3.2-1b.png [--title TEXT]
"""
import argparse
import json
import re
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("png")
    ap.add_argument("--title", default="")
    ap.add_argument("--max-us", type=float, default=0, help="cut the x axis (0 = whole step)")
    a = ap.parse_args()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        sys.exit("render_trace.py: needs matplotlib (pip install matplotlib)")
    try:
        with open(a.trace) as f:
            doc = json.load(f)
        events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"render_trace.py: {a.trace}: not a megaops trace ({e})")
    if not events:
        sys.exit(f"render_trace.py: {a.trace}: traceEvents: no complete (X) events")

    rows = sorted({(e["pid"], e["tid"]) for e in events})
    row_of = {r: i for i, r in enumerate(rows)}
    kind = lambda name: re.sub(r"^layer \d+ ", "", name)
    kinds = sorted({kind(e["name"]) for e in events})
    cmap = plt.get_cmap("tab20")
    colour = {k: cmap(i % 20) for i, k in enumerate(kinds)}

    height = max(4.0, min(40.0, len(rows) * 0.06))
    fig, ax = plt.subplots(figsize=(16, height))
    # One broken_barh per (row, colour): a call per slice takes minutes for a whole step.
    grey = (0.8, 0.8, 0.8)
    bars = {}
    for e in events:
        if a.max_us > 0 and e["ts"] > a.max_us:
            continue
        c = grey if e.get("cat") == "wait" else colour[kind(e["name"])]
        bars.setdefault((row_of[(e["pid"], e["tid"])], c), []).append((e["ts"], max(e["dur"], 0.05)))
    for (y, c), spans in bars.items():
        ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=c, linewidth=0)
    ax.set_ylim(-1, len(rows))
    ax.set_yticks([])
    ax.set_ylabel(f"{len(rows)} CTA slots (SM, concurrent CTA)")
    ax.set_xlabel("us from the first wait")
    if a.max_us > 0:
        ax.set_xlim(0, a.max_us)
    meta = doc.get("otherData", {})
    ax.set_title(a.title or f"{meta.get('model', '')} batch {meta.get('batch', '')} "
                 f"{meta.get('backend', '')} on {meta.get('gpu', '')}")
    handles = [Patch(color=colour[k], label=k) for k in kinds]
    handles.append(Patch(color=(0.8, 0.8, 0.8), label="waiting for producer"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)
    print(f"wrote {a.png}: {len(events)} slices on {len(rows)} rows")


if __name__ == "__main__":
    main()
