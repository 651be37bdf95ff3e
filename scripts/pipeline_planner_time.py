#!/usr/bin/env python3
"""How long `megaops plan-pipeline` takes to rank every composition of a streaming pipeline, on
this machine's CPU, without evidence and with evidence for every op shape.

For each pipeline x batch: `plan-pipeline --top 0 --json` first-principles (its JSON lists every
op shape it calibrates), then again with synthetic evidence for every one of those shapes (an
op-bench file per dtype, each op at twice its first-principles time, so every op is bisected as
real evidence would be: the slowest path). Records the median wall time of --repeats runs (the
process included), the planner's own time (plan_seconds: graphs, calibration, service table,
candidates), the candidate count and the machine. Writes one JSON file.

  scripts/pipeline_planner_time.py --megaops build-host/megaops --out times.json
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

from planner_time import cpu_model, git_sha

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PIPELINES = ["bench/pipelines/tts-0.6b-mimi.json", "bench/pipelines/tts-1.7b-snake.json"]
GPU = "synthetic"


def plan(megaops, pipeline, batch, profiles, out):
    cmd = [megaops, "plan-pipeline", "--pipeline", pipeline, "--batch", str(batch), "--top", "0",
           "--json", out]
    for p in profiles:
        cmd += ["--profile", p]
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, capture_output=True)
    wall = time.monotonic() - t0
    with open(out) as f:
        return wall, json.load(f)


def synthetic_evidence(plan_json, tmp):
    """One op-bench file per dtype with every op shape of the plan at twice its model time."""
    files = []
    for dtype, codec in (("bf16", False), ("fp32", True)):
        entries = []
        for c in plan_json["calibration"]:
            graph, rest = c["key"].split(": ", 1)
            if (graph == "codec") != codec:
                continue
            op, shape = rest.split("|", 1)
            entries.append({"op": op, "shape": shape, "backend": "conventional", "cta_budget": 132,
                            "us": 2 * c["model_us"], "samples": 1})
        path = os.path.join(tmp, dtype + ".json")
        with open(path, "w") as f:
            json.dump({"schema": "megaops-op-bench/1", "gpu": GPU, "dtype": dtype,
                       "entries": entries}, f)
        files.append(path)
    return files


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--megaops", required=True)
    ap.add_argument("--pipelines", nargs="+", default=PIPELINES)
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 8, 32, 64])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "plan.json")
        for pipeline in a.pipelines:
            path = pipeline if os.path.isabs(pipeline) else os.path.join(ROOT, pipeline)
            for batch in a.batches:
                _, first = plan(a.megaops, path, batch, [], out)
                evidence = synthetic_evidence(first, tmp)
                row = {"pipeline": first["pipeline"], "batch": batch,
                       "candidates": first["candidates"], "op_shapes": first["op_shapes"]}
                for name, profiles in (("no_evidence", []), ("evidence", evidence)):
                    walls, inner = [], []
                    for _ in range(a.repeats):
                        load = os.getloadavg()[0]
                        wall, j = plan(a.megaops, path, batch, profiles, out)
                        walls.append(wall)
                        inner.append(j["plan_seconds"])
                    row[name] = {"wall_s_median": statistics.median(walls), "wall_s": walls,
                                 "plan_seconds_median": statistics.median(inner),
                                 "shapes_without_evidence": j["op_shapes_without_evidence"],
                                 "load_before_last": load}
                rows.append(row)
                print("%s b%d: %d candidates, %.3f s (no evidence) / %.3f s (evidence for all %d "
                      "shapes)" % (row["pipeline"], batch, row["candidates"],
                                   row["no_evidence"]["wall_s_median"],
                                   row["evidence"]["wall_s_median"], row["op_shapes"]))
    result = {"schema": "megaops-pipeline-planner-time/1", "git_sha": git_sha(),
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu": cpu_model(),
              "cores": os.cpu_count(), "repeats": a.repeats, "rows": rows,
              "worst_wall_s": max(max(r["no_evidence"]["wall_s_median"],
                                      r["evidence"]["wall_s_median"]) for r in rows)}
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print("worst: %.3f s" % result["worst_wall_s"])


if __name__ == "__main__":
    main()
