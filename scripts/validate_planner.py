#!/usr/bin/env python3
"""The cut planner's validation protocol (docs/planner-validation.md), as three steps.

  plan     (any CPU)  for every case (preset x batch x objective), `megaops plan --pool N` on the
                      frozen profiles; writes one pool file per case and a manifest with the git sha.
  measure  (the GPU)  `megaops bench --plan` for every candidate of every pool; one JSON each.
  report   (any CPU)  hit rate, worst regret and prediction error of the planner and of the two
                      simpler selectors; a markdown report and a predicted-vs-measured plot.

  selftest            checks the report's arithmetic on a synthetic case (run by ctest).

Only the standard library is needed, and matplotlib for the plot (skipped when absent).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

PRESETS = ["llama3.2-1b", "qwen3-0.6b", "llama3.1-8b", "qwen3-8b"]
BATCHES = [1, 8, 32, 64]
OBJECTIVES = ["step", "ttft"]
PROMPT_TOKENS = 32  # bench's --prompt in `measure`, the profiles' context
SELECTORS = ["planner", "additive", "no_overlap"]


def case_name(preset, batch, objective):
    return f"{preset}_b{batch}_{objective}"


def git_sha():
    # On the GPU machine the tree is a copy without .git: the binaries' sha comes with them.
    if os.environ.get("MEGAOPS_GIT_SHA"):
        return os.environ["MEGAOPS_GIT_SHA"]
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def cmd_plan(args):
    os.makedirs(args.out, exist_ok=True)
    manifest = {"git_sha": git_sha(), "pool_size": args.pool, "cases": []}
    for preset in args.presets:
        for batch in args.batches:
            for objective in args.objectives:
                name = case_name(preset, batch, objective)
                profile = os.path.join(args.profiles, f"profile_{preset}_b{batch}.json")
                pool = os.path.join(args.out, name + ".json")
                cmd = [args.megaops, "plan", "--preset", preset, "--batch", str(batch),
                       "--objective", objective, "--top", "0", "--pool", str(args.pool),
                       "--pool-out", pool]
                if os.path.exists(profile):
                    cmd += ["--profile", profile]
                else:
                    print(f"{name}: no profile {profile}; planning from first principles",
                          file=sys.stderr)
                if objective == "ttft":
                    # The graph prefill replays a decode step of min(64, batch x 32) rows: its
                    # profile is the step case of that batch (the protocol profiles 32 and 64).
                    cmd += ["--tokens", str(PROMPT_TOKENS)]
                    rows = min(64, batch * PROMPT_TOKENS)
                    replay = os.path.join(args.profiles, f"profile_{preset}_b{rows}.json")
                    if rows != batch and os.path.exists(replay):
                        cmd += ["--profile", replay]
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                with open(pool) as f:
                    size = len(json.load(f))
                manifest["cases"].append({"case": name, "pool": pool, "candidates": size,
                                          "profile": profile if os.path.exists(profile) else None})
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"pools for {len(manifest['cases'])} cases in {args.out} (sha {manifest['git_sha']})")


def load_pool(pools_dir, case):
    # The manifest holds the planning machine's paths; the pool files sit beside it.
    with open(os.path.join(pools_dir, os.path.basename(case["pool"]))) as f:
        return json.load(f)


def cmd_measure(args):
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.pools, "manifest.json")) as f:
        manifest = json.load(f)
    for case in manifest["cases"]:
        if case["candidates"] < args.min_pool:
            print(f"{case['case']}: pool of {case['candidates']} < {args.min_pool}, not measured",
                  file=sys.stderr)
            continue
        pool = load_pool(args.pools, case)
        # One bench process per case: the model loads once and every candidate of the pool runs
        # on that executor; bench writes <out>/<case>_rank<r>.json, named after each plan file.
        # A TTFT case times the prefill only: two new tokens (bench's least) and more repeats,
        # since each is one prefill.
        ttft = case["case"].rsplit("_", 1)[1] == "ttft"
        gen = 2 if ttft else args.gen
        repeats = max(args.repeats, 7) if ttft else args.repeats
        with tempfile.TemporaryDirectory() as plans:
            # The pools' plans say PDL off themselves (a plan refuses --pdl beside it).
            cmd = [args.megaops, "bench", "--prompt", str(PROMPT_TOKENS),
                   "--gen", str(gen), "--repeats", str(repeats), "--json", args.out]
            for entry in pool:
                path = os.path.join(plans, f"{case['case']}_rank{entry['rank']}.json")
                with open(path, "w") as plan_file:
                    json.dump(entry["plan"], plan_file)
                cmd += ["--plan", path]
            if len(pool) == 1:  # one plan: --json names the file
                cmd[cmd.index("--json") + 1] = os.path.join(
                    args.out, f"{case['case']}_rank{pool[0]['rank']}.json")
            # A case that fails or hangs (the watchdog turns a hang into an error) is reported
            # and left unmeasured; the other cases still run.
            started = time.time()
            try:
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL,
                               timeout=args.case_timeout)
                print(f"{case['case']}: {len(pool)} candidates measured in "
                      f"{time.time() - started:.0f} s", file=sys.stderr, flush=True)
            except subprocess.CalledProcessError as e:
                print(f"{case['case']}: bench failed (exit {e.returncode}); not measured",
                      file=sys.stderr, flush=True)
            except subprocess.TimeoutExpired:
                print(f"{case['case']}: bench ran past {args.case_timeout} s; not measured",
                      file=sys.stderr, flush=True)


def measured_us(bench_json, objective):
    row = bench_json["results"][0]
    return 1e3 * (row["ttft_ms_median"] if objective == "ttft" else row["ms_per_token_median"])


def score_case(entries, objective):
    """entries: [{rank, selected_by, predicted_us, measured_us}] of one case. Returns per-selector
    hit and regret, and the absolute relative prediction errors."""
    fastest = min(e["measured_us"] for e in entries)
    out = {"fastest_us": fastest, "errors": [], "selectors": {}}
    for e in entries:
        out["errors"].append(abs(e["predicted_us"] - e["measured_us"]) / e["measured_us"])
    for sel in SELECTORS:
        picked = [e for e in entries if sel in e["selected_by"]]
        if not picked:
            continue
        m = picked[0]["measured_us"]
        out["selectors"][sel] = {"hit": m == fastest, "regret": m / fastest - 1.0}
    return out


def summarize(cases):
    """cases: {name: score_case output}. Returns the overall figures per selector."""
    summary = {}
    for sel in SELECTORS:
        scored = [c["selectors"][sel] for c in cases.values() if sel in c["selectors"]]
        if not scored:
            continue
        summary[sel] = {"cases": len(scored),
                        "hit_rate": sum(s["hit"] for s in scored) / len(scored),
                        "worst_regret": max(s["regret"] for s in scored)}
    errors = [e for c in cases.values() for e in c["errors"]]
    summary["median_abs_error"] = statistics.median(errors) if errors else None
    summary["worst_abs_error"] = max(errors) if errors else None
    return summary


def cmd_report(args):
    with open(os.path.join(args.pools, "manifest.json")) as f:
        manifest = json.load(f)
    cases, points = {}, []
    for case in manifest["cases"]:
        pool = load_pool(args.pools, case)
        objective = case["case"].rsplit("_", 1)[1]
        entries = []
        for entry in pool:
            path = os.path.join(args.measured, f"{case['case']}_rank{entry['rank']}.json")
            if not os.path.exists(path):
                continue
            with open(path) as f:
                m = measured_us(json.load(f), objective)
            entries.append({"rank": entry["rank"], "selected_by": entry["selected_by"],
                            "predicted_us": entry["plan"]["predicted_us"], "measured_us": m})
            points.append((entry["plan"]["predicted_us"], m, objective))
        if len(entries) >= args.min_pool:
            cases[case["case"]] = score_case(entries, objective)
    summary = summarize(cases)
    lines = [f"# Planner validation (pools frozen at {manifest['git_sha']})", "",
             f"{len(cases)} of {len(manifest['cases'])} cases measurable "
             f"(pool of at least {args.min_pool} measured candidates).", "",
             "| selector | cases | pick = fastest | worst regret |", "| --- | --- | --- | --- |"]
    for sel in SELECTORS:
        if sel in summary:
            s = summary[sel]
            lines.append(f"| {sel} | {s['cases']} | {100 * s['hit_rate']:.0f}% | "
                         f"{100 * s['worst_regret']:.2f}% |")
    # The same per objective, when the run has more than one.
    objectives = sorted({name.rsplit("_", 1)[1] for name in cases})
    if len(objectives) > 1:
        lines += ["", "| objective | selector | cases | pick = fastest | worst regret |",
                  "| --- | --- | --- | --- | --- |"]
        medians = []
        for objective in objectives:
            part = summarize({n: c for n, c in cases.items()
                              if n.rsplit("_", 1)[1] == objective})
            for sel in SELECTORS:
                if sel in part:
                    s = part[sel]
                    lines.append(f"| {objective} | {sel} | {s['cases']} | "
                                 f"{100 * s['hit_rate']:.0f}% | {100 * s['worst_regret']:.2f}% |")
            medians.append(f"{objective} {100 * part['median_abs_error']:.1f}%")
        lines += ["", "Median absolute prediction error by objective: " + ", ".join(medians) + "."]
    lines += ["", "| case | planner's pick (us) | measured fastest (us) | regret | within 1% |"
                  " additive pick regret |", "| --- | --- | --- | --- | --- | --- |"]
    for name, c in cases.items():
        sel = c["selectors"]
        pick = c["fastest_us"] * (1.0 + sel["planner"]["regret"]) if "planner" in sel else None
        add = sel.get("additive")
        lines.append(
            f"| {name} | {pick:.1f} | {c['fastest_us']:.1f} | "
            f"{100 * sel['planner']['regret']:.2f}% | "
            f"{'yes' if sel['planner']['regret'] <= 0.01 else 'no'} | "
            f"{100 * add['regret']:.2f}% |" if pick is not None and add else f"| {name} | - | - | - | - | - |")
    if summary["median_abs_error"] is not None:
        lines += ["", f"Prediction error |predicted - measured| / measured: median "
                      f"{100 * summary['median_abs_error']:.1f}%, worst "
                      f"{100 * summary['worst_abs_error']:.1f}%."]
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    if args.plot and points:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("matplotlib not installed: no plot", file=sys.stderr)
            return
        # Log axes: TTFT at batch 64 is ~100x a batch-1 step.
        lo = 0.8 * min(min(p[0] for p in points), min(p[1] for p in points))
        hi = 1.25 * max(max(p[0] for p in points), max(p[1] for p in points))
        plt.figure(figsize=(5, 5))
        for objective in sorted({p[2] for p in points}):
            xs = [p[0] for p in points if p[2] == objective]
            ys = [p[1] for p in points if p[2] == objective]
            plt.scatter(xs, ys, s=10, label=f"{objective} ({len(xs)})")
        plt.plot([lo, hi], [lo, hi], "k--", linewidth=0.8)
        plt.xscale("log")
        plt.yscale("log")
        plt.xlim(lo, hi)
        plt.ylim(lo, hi)
        plt.legend()
        plt.xlabel("predicted (us)")
        plt.ylabel("measured (us)")
        plt.title("cut planner: predicted vs measured")
        plt.savefig(args.plot, dpi=120, bbox_inches="tight")


def cmd_selftest(_args):
    # One case, three candidates: the planner picks the measured fastest (regret 0), the additive
    # selector picks one 5% slower; prediction errors 10%, 0%, 20%.
    entries = [
        {"rank": 1, "selected_by": ["planner"], "predicted_us": 110.0, "measured_us": 100.0},
        {"rank": 2, "selected_by": ["additive"], "predicted_us": 105.0, "measured_us": 105.0},
        {"rank": 3, "selected_by": ["no_overlap"], "predicted_us": 144.0, "measured_us": 120.0},
    ]
    c = score_case(entries, "step")
    assert c["fastest_us"] == 100.0
    assert c["selectors"]["planner"] == {"hit": True, "regret": 0.0}
    assert not c["selectors"]["additive"]["hit"]
    assert abs(c["selectors"]["additive"]["regret"] - 0.05) < 1e-12
    assert abs(c["selectors"]["no_overlap"]["regret"] - 0.2) < 1e-12
    s = summarize({"a": c})
    assert s["planner"]["hit_rate"] == 1.0 and s["additive"]["hit_rate"] == 0.0
    assert abs(s["median_abs_error"] - 0.1) < 1e-12 and abs(s["worst_abs_error"] - 0.2) < 1e-12
    assert measured_us({"results": [{"ms_per_token_median": 1.5, "ttft_ms_median": 2.0}]},
                       "ttft") == 2000.0
    print("validate_planner selftest: ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan")
    p.add_argument("--megaops", default="build/megaops")
    p.add_argument("--profiles", required=True,
                   help="folder with profile_<preset>_b<batch>.json from `megaops profile`")
    p.add_argument("--out", required=True)
    p.add_argument("--pool", type=int, default=8)
    p.add_argument("--presets", nargs="+", default=PRESETS)
    p.add_argument("--batches", nargs="+", type=int, default=BATCHES)
    p.add_argument("--objectives", nargs="+", default=OBJECTIVES)
    m = sub.add_parser("measure")
    m.add_argument("--megaops", default="build/megaops")
    m.add_argument("--pools", required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--min-pool", type=int, default=8)
    m.add_argument("--gen", type=int, default=128)
    m.add_argument("--repeats", type=int, default=3)
    m.add_argument("--case-timeout", type=int, default=300,
                   help="seconds one case's bench may run before it is left unmeasured")
    r = sub.add_parser("report")
    r.add_argument("--pools", required=True)
    r.add_argument("--measured", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--plot")
    r.add_argument("--min-pool", type=int, default=8)
    sub.add_parser("selftest")
    args = ap.parse_args()
    {"plan": cmd_plan, "measure": cmd_measure, "report": cmd_report,
     "selftest": cmd_selftest}[args.cmd](args)


if __name__ == "__main__":
    main()
