#!/usr/bin/env python3
"""How long `megaops plan` takes to rank every candidate, on this machine's CPU.

For each preset x batch x objective, runs `megaops plan --top 0` (with `--with-persistent`, the
largest candidate space: persistent regions and dynamic sharing ranked too) on the profile of that
preset and batch, `--repeats` times, and records the median wall time, the candidate count and the
machine (CPU model, cores, load average before the run). Writes one JSON file.

  scripts/planner_time.py --megaops build/megaops --profiles DIR --out planner_time.json
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import time

PRESETS = ["llama3.2-1b", "qwen3-0.6b", "llama3.1-8b", "qwen3-8b"]


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def git_sha():
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--megaops", default="build/megaops")
    ap.add_argument("--profiles", required=True,
                    help="folder of profile_<preset>_b<batch>.json (megaops profile --json)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--presets", nargs="+", default=PRESETS)
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 8, 32, 64])
    ap.add_argument("--objectives", nargs="+", default=["step", "ttft"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--limit-s", type=float, default=1.0, help="the goal each case is held to")
    args = ap.parse_args()
    rows = []
    for preset in args.presets:
        for batch in args.batches:
            profile = os.path.join(args.profiles, f"profile_{preset}_b{batch}.json")
            if not os.path.exists(profile):
                raise SystemExit(f"error: {profile}: missing")
            for objective in args.objectives:
                cmd = [args.megaops, "plan", "--preset", preset, "--batch", str(batch),
                       "--objective", objective, "--profile", profile, "--top", "0",
                       "--with-persistent"]
                times, out = [], ""
                load = os.getloadavg()[0]
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    r = subprocess.run(cmd, capture_output=True, text=True)
                    times.append(time.perf_counter() - t0)
                    if r.returncode != 0:
                        raise SystemExit(f"error: {' '.join(cmd)}: {r.stderr.strip()}")
                    out = r.stdout
                m = re.search(r"(\d+) candidates", out)
                rows.append({"preset": preset, "batch": batch, "objective": objective,
                             "candidates": int(m.group(1)) if m else None,
                             "wall_s": statistics.median(times), "runs_s": times,
                             "load_before": load})
                print(f"{preset:12s} b{batch:<3d} {objective:5s} {rows[-1]['candidates']:>6} "
                      f"candidates {rows[-1]['wall_s']:.3f} s")
    worst = max(r["wall_s"] for r in rows)
    result = {"what": "megaops plan --with-persistent --top 0, median wall time per case",
              "git_sha": git_sha(), "cpu": cpu_model(), "cores": os.cpu_count(),
              "profiles": args.profiles, "limit_s": args.limit_s, "worst_wall_s": worst,
              "all_within_limit": worst <= args.limit_s, "cases": rows}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(f"worst {worst:.3f} s over {len(rows)} cases (goal <= {args.limit_s} s): "
          f"{'met' if worst <= args.limit_s else 'NOT met'}")


if __name__ == "__main__":
    main()
