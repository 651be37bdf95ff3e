#!/usr/bin/env python3
"""The streaming pipeline planner's validation protocol (docs/pipeline.md, "Validation"), frozen
before anything is measured: every case, candidate pool and rule is fixed by `prepare` and `plan`
and written down before `measure` runs.

Cases: the two example pipelines (bench/pipelines/tts-0.6b-mimi.json, tts-1.7b-snake.json) x
batch 1, 8, 32, 64. A case's pool is every candidate today's executors run (the planner ranks
every composition, 394 per case, runnable or not; 9 run: P and C conventional, B and L each
conventional, conventional + PDL or the PDL chain), at least 8 measured end to end.

  prepare  (any CPU)  DIR/pipelines/*.json: the example pipelines with schedule.stream_frames set
                      to --stream-frames (frozen), and DIR/protocol.json: git sha, date, cases,
                      repeats, rounds, goals.
  evidence (the GPU)  per case `megaops stream --evidence-out`: the producer's and the local
                      transformer's per-op profiles at the planner's contexts and the codec ops'
                      times at its windows, measured with the stages the stream runs.
  plan     (any CPU)  per case `megaops plan-pipeline --profile ... --pool 9 --pool-out`: the pool
                      with its predictions, frozen (a manifest of the pools' sha256).
  measure  (the GPU)  per case one `megaops stream` process timing every pool candidate
                      (--composition each), --repeats streams per candidate and round, --rounds
                      passes in alternating order, one warm-up stream before each; resumable.
  report   (any CPU)  per case: pick vs measured best (hit, regret), T_pub mean / p95 and RTFx of
                      the pick, the all-conventional design and (predicted only: no persistent
                      executor yet) the single megakernel; where the planner predicts a
                      multi-megakernel composition to win; goals pass / fail; markdown, JSON, plot.
  all      (the GPU)  prepare, evidence, plan, measure, report in one go.
  selftest            the arithmetic and a whole run on a stand-in megaops (ctest, no GPU).

Goals: pick = measured best in >= 95% of the cases, worst regret <= 2%.
Only the standard library is needed, and matplotlib for the plot (skipped when absent).
"""
import argparse
import datetime
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PIPELINES = ["bench/pipelines/tts-0.6b-mimi.json", "bench/pipelines/tts-1.7b-snake.json"]
BATCHES = [1, 8, 32, 64]
STREAM_FRAMES = 32   # 2.56 s of audio a stream: T_pub needs the first 5 steps, RTFx the rest
REPEATS = 3          # timed streams per candidate and round
ROUNDS = 2           # passes over the pool, the second in reverse order
POOL = 9             # every runnable candidate
MIN_POOL = 8         # measured candidates a case needs to count
GOAL_HIT_RATE = 0.95
GOAL_WORST_REGRET = 0.02
TIE = 0.005          # a pick within 0.5% of the best is reported as "within noise" (not a hit)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def git_sha():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def read_json(path):
    with open(path) as f:
        return json.load(f)


def write_json(path, obj):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def run(cmd):
    log("+", " ".join(cmd))
    subprocess.run(cmd, check=True)


def percentile(values, q):
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (pos - lo) * (v[hi] - v[lo])


def case_name(pipeline, batch):
    return "%s-b%d" % (pipeline, batch)


def cases(protocol):
    for p in protocol["pipelines"]:
        for b in protocol["batches"]:
            yield p, b, case_name(p, b)


def pipeline_file(d, name):
    return os.path.join(d, "pipelines", name + ".json")


# ---- steps ------------------------------------------------------------------------------------


def cmd_prepare(a):
    names = []
    for src in a.pipelines:
        p = read_json(src if os.path.isabs(src) else os.path.join(ROOT, src))
        p["schedule"]["stream_frames"] = a.stream_frames
        write_json(pipeline_file(a.dir, p["name"]), p)
        names.append(p["name"])
    protocol = {"schema": "megaops-pipeline-validation/1", "git_sha": git_sha(),
                "date": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
                "pipelines": names, "batches": a.batches, "stream_frames": a.stream_frames,
                "repeats": a.repeats, "rounds": a.rounds, "pool": POOL, "min_pool": MIN_POOL,
                "goals": {"hit_rate": GOAL_HIT_RATE, "worst_regret": GOAL_WORST_REGRET},
                "tie": TIE}
    write_json(os.path.join(a.dir, "protocol.json"), protocol)
    log("prepare: %d cases in %s" % (len(names) * len(a.batches), a.dir))


def cmd_evidence(a):
    protocol = read_json(os.path.join(a.dir, "protocol.json"))
    for p, b, case in cases(protocol):
        out = os.path.join(a.dir, "evidence", case)
        if a.resume and os.path.exists(os.path.join(out, "codec.json")):
            continue
        run([a.megaops, "stream", "--pipeline", pipeline_file(a.dir, p), "--batch", str(b),
             "--evidence-out", out])


def cmd_plan(a):
    protocol = read_json(os.path.join(a.dir, "protocol.json"))
    manifest = {"git_sha": git_sha(), "pools": {}}
    for p, b, case in cases(protocol):
        ev = os.path.join(a.dir, "evidence", case)
        pool = os.path.join(a.dir, "pools", case + ".json")
        os.makedirs(os.path.dirname(pool), exist_ok=True)
        cmd = [a.megaops, "plan-pipeline", "--pipeline", pipeline_file(a.dir, p), "--batch",
               str(b), "--pool", str(protocol["pool"]), "--pool-out", pool, "--json",
               os.path.join(a.dir, "pools", case + ".plan.json"), "--top", "3"]
        for f in ("producer.json", "local.json", "codec.json"):
            if os.path.exists(os.path.join(ev, f)):
                cmd += ["--profile", os.path.join(ev, f)]
        run(cmd)
        manifest["pools"][case] = sha256(pool)
    write_json(os.path.join(a.dir, "pools", "manifest.json"), manifest)


def cmd_measure(a):
    protocol = read_json(os.path.join(a.dir, "protocol.json"))
    manifest = read_json(os.path.join(a.dir, "pools", "manifest.json"))
    for p, b, case in cases(protocol):
        pool_path = os.path.join(a.dir, "pools", case + ".json")
        if sha256(pool_path) != manifest["pools"][case]:
            raise SystemExit("measure: %s changed after plan (frozen)" % pool_path)
        out = os.path.join(a.dir, "measured", case + ".json")
        if a.resume and os.path.exists(out):
            continue
        cmd = [a.megaops, "stream", "--pipeline", pipeline_file(a.dir, p), "--batch", str(b),
               "--repeats", str(protocol["repeats"]), "--rounds", str(protocol["rounds"]),
               "--warmup", "1", "--timestamps", out,
               "--out", os.path.join(a.dir, "measured", case + ".wav")]
        for i, c in enumerate(read_json(pool_path)):
            f = os.path.join(a.dir, "pools", case, "cand%d.json" % i)
            write_json(f, c)
            cmd += ["--composition", f]
        os.makedirs(os.path.dirname(out), exist_ok=True)
        run(cmd)


# ---- report -----------------------------------------------------------------------------------


def score_case(pool, plan, measured):
    """One case: every pool candidate with its prediction and measurement, the pick (the pool's
    first entry: the planner's best runnable) against the measured best."""
    by_label = {c["label"]: c for c in measured["compositions"]}
    rows = []
    for c in pool:
        m = by_label.get(c["label"])
        if not m:
            continue
        t = [r["t_pub_ms"] for r in m["runs"]]
        rows.append({"label": c["label"], "rank": c["rank"] + 1,
                     "predicted_ms": c["predicted"]["t_pub_us"] / 1000.0,
                     "predicted_rtfx": c["predicted"]["rtfx"],
                     "t_pub_mean_ms": statistics.fmean(t), "t_pub_p95_ms": percentile(t, 0.95),
                     "rtfx_mean": statistics.fmean(r["rtfx"] for r in m["runs"]),
                     "steady_rtfx_mean": statistics.fmean(r.get("steady_rtfx", r["rtfx"])
                                                          for r in m["runs"])})
    out = {"candidates": rows, "measured": len(rows), "counts": len(rows) >= MIN_POOL}
    if not rows:
        return out
    pick = rows[0] if rows[0]["label"] == pool[0]["label"] else None
    best = min(rows, key=lambda r: r["t_pub_mean_ms"])
    base = next((r for r in rows if r["label"] == plan_baseline_label(plan)), None)
    out.update({"pick": pick, "best": best, "baseline": base})
    if pick:
        out["hit"] = pick["label"] == best["label"]
        out["regret"] = pick["t_pub_mean_ms"] / best["t_pub_mean_ms"] - 1
        out["within_noise"] = out["regret"] <= TIE
    errs = [abs(r["predicted_ms"] - r["t_pub_mean_ms"]) / r["t_pub_mean_ms"] for r in rows]
    out["median_abs_error"] = statistics.median(errs)
    ranked = plan.get("ranked", [])
    if ranked:
        top = ranked[0]
        mono = ranked[plan["monolith_rank"] - 1] if plan.get("monolith_rank") else None
        out["predicted_best"] = {"label": top["label"], "t_pub_ms": top["t_pub_us"] / 1000.0,
                                 "runnable": top["executor_supports"],
                                 "megakernels": top["label"].count(":pers")}
        if mono:
            out["monolith_predicted_ms"] = mono["t_pub_us"] / 1000.0
    return out


def plan_baseline_label(plan):
    r = plan.get("baseline_rank")
    return plan["ranked"][r - 1]["label"] if r and plan.get("ranked") else \
        "P:conv | B:conv | L:conv | C:conv serial"


def summarize(scores):
    counted = [s for s in scores.values() if s.get("counts") and "hit" in s]
    hits = [s["hit"] for s in counted]
    regrets = [s["regret"] for s in counted]
    summary = {"cases": len(scores), "cases_counted": len(counted),
               "hit_rate": sum(hits) / len(hits) if hits else None,
               "worst_regret": max(regrets) if regrets else None,
               "within_noise": sum(s["within_noise"] for s in counted)}
    summary["goals"] = {
        "hit_rate": summary["hit_rate"] is not None and summary["hit_rate"] >= GOAL_HIT_RATE,
        "worst_regret": summary["worst_regret"] is not None and
        summary["worst_regret"] <= GOAL_WORST_REGRET}
    return summary


def markdown(protocol, scores, summary):
    g = summary["goals"]
    lines = ["# Streaming pipeline planner validation", "",
             "git %s, %s; %d cases (%s x batch %s), %d frames a stream, %d repeats x %d rounds"
             % (protocol["git_sha"][:12], protocol["date"], summary["cases"],
                ", ".join(protocol["pipelines"]), protocol["batches"], protocol["stream_frames"],
                protocol["repeats"], protocol["rounds"]), "",
             "- hit rate (pick = measured best): %s (goal >= %.0f%%: %s)"
             % (fmt_pct(summary["hit_rate"]), 100 * GOAL_HIT_RATE, "pass" if g["hit_rate"] else "FAIL"),
             "- worst regret: %s (goal <= %.0f%%: %s)"
             % (fmt_pct(summary["worst_regret"]), 100 * GOAL_WORST_REGRET,
                "pass" if g["worst_regret"] else "FAIL"),
             "- picks within %.1f%% of the best (noise): %d of %d" % (100 * TIE,
                                                                       summary["within_noise"],
                                                                       summary["cases_counted"]),
             "", "| case | pick | measured best | regret | T_pub pick mean / p95 ms | "
             "all-conventional mean / p95 ms | RTFx pick / conv | one megakernel (predicted) ms | "
             "predicted best overall |", "|" + " --- |" * 9]
    for case, s in scores.items():
        if not s.get("pick"):
            lines.append("| %s | (not measured) |" % case + " |" * 7)
            continue
        p, b, base = s["pick"], s["best"], s.get("baseline") or {}
        pb = s.get("predicted_best", {})
        lines.append("| %s | %s | %s | %s | %.3f / %.3f | %s | %.2f / %s | %s | %s |" % (
            case, p["label"], b["label"], fmt_pct(s["regret"]), p["t_pub_mean_ms"],
            p["t_pub_p95_ms"],
            "%.3f / %.3f" % (base["t_pub_mean_ms"], base["t_pub_p95_ms"]) if base else "-",
            p["rtfx_mean"], "%.2f" % base["rtfx_mean"] if base else "-",
            "%.3f" % s["monolith_predicted_ms"] if "monolith_predicted_ms" in s else "-",
            "%s (%.3f ms%s%s)" % (pb.get("label", "-"), pb.get("t_pub_ms", 0),
                                   "" if pb.get("runnable") else ", not runnable",
                                   ", %d megakernels" % pb["megakernels"]
                                   if pb.get("megakernels", 0) > 1 else "")))
    multi = [c for c, s in scores.items() if s.get("predicted_best", {}).get("megakernels", 0) > 1]
    lines += ["", "Cases where the planner predicts a multi-megakernel composition to win "
              "(predicted only: persistent regions have no executor yet): %s"
              % (", ".join(multi) if multi else "none"), ""]
    return "\n".join(lines)


def fmt_pct(x):
    return "-" if x is None else "%.2f%%" % (100 * x)


def plot(path, scores):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("report: matplotlib missing, no plot")
        return False
    names = [c for c, s in scores.items() if s.get("candidates")]
    fig, axes = plt.subplots(1, max(1, len(names)), figsize=(3.2 * max(1, len(names)), 3.6),
                             squeeze=False)
    for ax, case in zip(axes[0], names):
        rows = scores[case]["candidates"]
        xs = range(len(rows))
        means = [r["t_pub_mean_ms"] for r in rows]
        p95 = [r["t_pub_p95_ms"] - r["t_pub_mean_ms"] for r in rows]
        colors = ["tab:green" if i == 0 else "tab:gray" for i in xs]
        ax.bar(xs, means, yerr=[[0] * len(rows), p95], color=colors)
        ax.plot(xs, [r["predicted_ms"] for r in rows], "k.", label="predicted")
        ax.set_title(case, fontsize=8)
        ax.set_xlabel("predicted rank (green: pick)", fontsize=7)
        ax.set_ylabel("T_pub ms (mean, p95 whisker)", fontsize=7)
        ax.tick_params(labelsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def cmd_report(a):
    protocol = read_json(os.path.join(a.dir, "protocol.json"))
    scores = {}
    for _, _, case in cases(protocol):
        mpath = os.path.join(a.dir, "measured", case + ".json")
        if not os.path.exists(mpath):
            scores[case] = {"measured": 0, "counts": False}
            continue
        scores[case] = score_case(read_json(os.path.join(a.dir, "pools", case + ".json")),
                                  read_json(os.path.join(a.dir, "pools", case + ".plan.json")),
                                  read_json(mpath))
    summary = summarize(scores)
    write_json(os.path.join(a.dir, "report.json"), {"protocol": protocol, "summary": summary,
                                                    "cases": scores})
    md = markdown(protocol, scores, summary)
    with open(os.path.join(a.dir, "report.md"), "w") as f:
        f.write(md + "\n")
    plot(os.path.join(a.dir, "report.png"), scores)
    print(md)
    return summary


def cmd_all(a):
    cmd_prepare(a)
    cmd_evidence(a)
    cmd_plan(a)
    cmd_measure(a)
    cmd_report(a)


# ---- selftest ---------------------------------------------------------------------------------

FAKE = r'''#!/usr/bin/env python3
# A stand-in megaops for validate_pipeline.py's selftest: plan-pipeline ranks nine compositions
# with made-up predictions, stream writes evidence or timestamps whose T_pub follows the
# prediction times FAKE_SCALE (with the first two swapped when FAKE_SWAP is set).
import json, os, sys
args = sys.argv[1:]
def opt(name):
    return args[args.index(name) + 1] if name in args else None
def opts(name):
    return [args[i + 1] for i, a in enumerate(args) if a == name]
LABELS = ["P:conv | B:%s | L:%s | C:conv serial" % (b, l)
          for b in ("chain", "pdl", "conv") for l in ("chain", "pdl", "conv")]
def pred(i):
    return 1000.0 * (10 + i)
if args[0] == "plan-pipeline":
    pool = [{"schema": "megaops-pipeline-composition/1", "rank": i, "label": l,
             "regions": [], "policy": "serial", "executor_supports": True,
             "predicted": {"t_pub_us": pred(i), "rtfx": 3.0}} for i, l in enumerate(LABELS)]
    json.dump(pool[:int(opt("--pool"))], open(opt("--pool-out"), "w"))
    ranked = [{"label": "P:pers | B+L:pers | C:pers fixed_split 88", "t_pub_us": 5000.0,
               "executor_supports": False}] + [
        {"label": l, "t_pub_us": pred(i), "executor_supports": True} for i, l in enumerate(LABELS)]
    ranked.append({"label": "P+B+L+C:pers serial", "t_pub_us": 8000.0, "executor_supports": False})
    json.dump({"ranked": ranked, "baseline_rank": 10, "monolith_rank": 11,
               "profiles": opts("--profile")}, open(opt("--json"), "w"))
elif args[0] == "stream":
    if opt("--evidence-out"):
        os.makedirs(opt("--evidence-out"), exist_ok=True)
        for f in ("producer.json", "local.json", "codec.json"):
            open(os.path.join(opt("--evidence-out"), f), "w").write("{}")
        sys.exit(0)
    comps = [json.load(open(f)) for f in opts("--composition")]
    scale = float(os.environ.get("FAKE_SCALE", "1.0"))
    out = []
    for c in comps:
        t = c["predicted"]["t_pub_us"] / 1000.0 * scale
        if os.environ.get("FAKE_SWAP") and c["rank"] in (0, 1):
            t = (pred(1 - c["rank"]) / 1000.0) * scale
        runs = [{"t_pub_ms": t + 0.01 * k, "rtfx": 2.0} for k in range(int(opt("--repeats")) * int(opt("--rounds")))]
        out.append({"label": c["label"], "runs": runs})
    json.dump({"compositions": out}, open(opt("--timestamps"), "w"))
    open(opt("--out"), "w").write("wav")
'''


def _selftest_arithmetic():
    assert percentile([1, 2, 3, 4], 0.5) == 2.5
    assert abs(percentile(list(range(101)), 0.95) - 95) < 1e-9
    pool = [{"label": "a", "rank": 0, "predicted": {"t_pub_us": 1000, "rtfx": 2}},
            {"label": "b", "rank": 1, "predicted": {"t_pub_us": 2000, "rtfx": 2}}]
    meas = {"compositions": [{"label": "a", "runs": [{"t_pub_ms": 1.015, "rtfx": 2}] * 3},
                             {"label": "b", "runs": [{"t_pub_ms": 1.0, "rtfx": 2}] * 3}]}
    plan = {"ranked": [{"label": "a", "t_pub_us": 1000, "executor_supports": True},
                       {"label": "b", "t_pub_us": 2000, "executor_supports": True}],
            "baseline_rank": 2, "monolith_rank": None}
    s = score_case(pool, plan, meas)
    assert not s["hit"] and abs(s["regret"] - 0.015) < 1e-9, s
    assert s["best"]["label"] == "b" and s["baseline"]["label"] == "b"
    assert not s["counts"]  # two candidates: fewer than MIN_POOL
    summ = summarize({"x": dict(s, counts=True)})
    assert summ["hit_rate"] == 0.0 and not summ["goals"]["hit_rate"] and summ["goals"]["worst_regret"]


def _selftest_run(tmp):
    fake = os.path.join(tmp, "megaops")
    with open(fake, "w") as f:
        f.write(FAKE)
    os.chmod(fake, 0o755)
    d = os.path.join(tmp, "v")
    me = [sys.executable, os.path.abspath(__file__)]
    base = ["--dir", d, "--megaops", fake]
    subprocess.run(me + ["prepare", "--dir", d, "--batches", "1", "8"], check=True)
    protocol = read_json(os.path.join(d, "protocol.json"))
    assert protocol["stream_frames"] == STREAM_FRAMES and len(protocol["pipelines"]) == 2
    p = read_json(pipeline_file(d, protocol["pipelines"][0]))
    assert p["schedule"]["stream_frames"] == STREAM_FRAMES
    for step in ("evidence", "plan", "measure"):
        subprocess.run(me + [step] + base, check=True)
    plan = read_json(os.path.join(d, "pools", "tts-0.6b-mimi-b8.plan.json"))
    assert len(plan["profiles"]) == 3, plan["profiles"]  # the evidence reached the planner
    out = subprocess.run(me + ["report", "--dir", d], check=True, capture_output=True, text=True)
    rep = read_json(os.path.join(d, "report.json"))
    assert rep["summary"]["hit_rate"] == 1.0 and rep["summary"]["worst_regret"] == 0.0, rep["summary"]
    assert rep["summary"]["goals"]["hit_rate"] and rep["summary"]["cases_counted"] == 4
    assert "multi-megakernel" in out.stdout and "tts-1.7b-snake-b1" in out.stdout
    # A frozen pool edited after plan is refused.
    pool = os.path.join(d, "pools", "tts-0.6b-mimi-b1.json")
    with open(pool, "a") as f:
        f.write(" ")
    r = subprocess.run(me + ["measure"] + base, capture_output=True, text=True)
    assert r.returncode != 0 and "frozen" in r.stderr + r.stdout
    subprocess.run(me + ["plan"] + base, check=True)
    # Swapped measurements: the pick is second, 10% slower than the best.
    env = dict(os.environ, FAKE_SWAP="1")
    subprocess.run(me + ["measure"] + base, check=True, env=env)
    subprocess.run(me + ["report", "--dir", d], check=True, capture_output=True)
    rep = read_json(os.path.join(d, "report.json"))
    assert rep["summary"]["hit_rate"] == 0.0, rep["summary"]
    assert abs(rep["summary"]["worst_regret"] - 0.1) < 1e-3, rep["summary"]
    assert not rep["summary"]["goals"]["worst_regret"]


def _selftest_real(tmp, megaops):
    """The real binary on the tiny pipeline (no GPU: stream runs the CPU oracle, plan-pipeline
    plans without evidence): the script and megaops agree on every file format."""
    d = os.path.join(tmp, "real")
    me = [sys.executable, os.path.abspath(__file__)]
    tiny = os.path.join(ROOT, "tests", "fixtures", "pipelines", "tiny.json")
    subprocess.run(me + ["prepare", "--dir", d, "--pipelines", tiny, "--batches", "1", "2",
                         "--stream-frames", "12", "--repeats", "2", "--rounds", "2"], check=True)
    for step in ("plan", "measure"):
        subprocess.run(me + [step, "--dir", d, "--megaops", megaops], check=True)
    subprocess.run(me + ["report", "--dir", d], check=True, capture_output=True)
    rep = read_json(os.path.join(d, "report.json"))
    assert rep["summary"]["cases_counted"] == 2, rep["summary"]
    for case in rep["cases"].values():
        assert case["measured"] == POOL and case["pick"] and case["baseline"], case
        assert all(r["t_pub_mean_ms"] > 0 and r["rtfx_mean"] > 0 for r in case["candidates"])


def cmd_selftest(a):
    _selftest_arithmetic()
    with tempfile.TemporaryDirectory() as tmp:
        _selftest_run(tmp)
        if a.megaops:
            _selftest_real(tmp, os.path.abspath(a.megaops))
    print("validate_pipeline selftest: ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    default_megaops = os.path.join(ROOT, "build", "megaops")

    def common(p, megaops=True):
        p.add_argument("--dir", required=True, help="the validation's folder")
        if megaops:
            p.add_argument("--megaops", default=default_megaops)
            p.add_argument("--resume", action="store_true", help="skip cases already done")

    def prep_args(p):
        p.add_argument("--pipelines", nargs="+", default=PIPELINES)
        p.add_argument("--batches", nargs="+", type=int, default=BATCHES)
        p.add_argument("--stream-frames", type=int, default=STREAM_FRAMES)
        p.add_argument("--repeats", type=int, default=REPEATS)
        p.add_argument("--rounds", type=int, default=ROUNDS)

    p = sub.add_parser("prepare")
    common(p, megaops=False)
    prep_args(p)
    for name in ("evidence", "plan", "measure"):
        common(sub.add_parser(name))
    common(sub.add_parser("report"), megaops=False)
    p = sub.add_parser("all")
    common(p)
    prep_args(p)
    p = sub.add_parser("selftest")
    p.add_argument("--megaops", help="also run the real binary on the tiny pipeline (CPU)")
    a = ap.parse_args()
    {"prepare": cmd_prepare, "evidence": cmd_evidence, "plan": cmd_plan, "measure": cmd_measure,
     "report": cmd_report, "all": cmd_all, "selftest": cmd_selftest}[a.cmd](a)


if __name__ == "__main__":
    main()
