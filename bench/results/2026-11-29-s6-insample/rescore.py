#!/usr/bin/env python3
"""Round 2 of the planner protocol (bench/results/2026-11-29-s6-call5) re-scored in sample with the
round-3 planner: a check of the direction of its two changes, NOT a validation (the step figures
come from round 2's own measurements). For each measured case the round-2 profile gets
graph_step_us = the measured all-conventional step (what `profile --gen 128` now times: the same
context as the measurement) and serial_overlap_step_us shifted by the same amount; `megaops plan`
ranks again with the round-3 rule (every op of a plan with an overlap region pays the serial
overlap cost); each measured candidate is matched by its regions.
  python3 bench/results/2026-11-29-s6-insample/rescore.py [--megaops build/megaops]"""
import argparse, json, os, statistics, subprocess, tempfile

R = "bench/results/2026-11-29-s6-call5"


def sig(plan):
    return json.dumps([(r["ops"], r["backend"]) for r in plan["regions"]])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--megaops", default="build/megaops")
    args = ap.parse_args()
    man = json.load(open(f"{R}/pools/manifest.json"))
    new_errs, old_errs, picks = [], [], []
    tmp = tempfile.mkdtemp()
    for c in man["cases"]:
        if c["candidates"] < 8:
            continue
        name = c["case"]
        preset, b, _ = name.rsplit("_", 2)
        pool = json.load(open(f"{R}/pools/{name}.json"))
        meas, conv = {}, None
        for e in pool:
            m = json.load(open(f"{R}/measured/{name}_rank{e['rank']}.json"))
            m = m["results"][0]["ms_per_token_median"] * 1e3
            meas[sig(e["plan"])] = (m, e["plan"]["predicted_us"])
            if all(r["backend"] == "conventional" for r in e["plan"]["regions"]):
                conv = m
        prof = json.load(open(f"{R}/profiles/profile_{preset}_{b}.json"))
        shift = conv - prof["graph_step_us"]
        prof["graph_step_us"] = conv
        prof["serial_overlap_step_us"] += shift
        pf, po = os.path.join(tmp, "p.json"), os.path.join(tmp, "pool.json")
        json.dump(prof, open(pf, "w"))
        subprocess.run([args.megaops, "plan", "--preset", preset, "--batch", b[1:], "--profile", pf,
                        "--top", "0", "--pool", "2000", "--pool-out", po],
                       capture_output=True, text=True, check=True)
        new = {sig(e["plan"]): e for e in json.load(open(po))}
        pick = next(e for e in new.values() if "planner" in e["selected_by"])
        fastest = min(m for m, _ in meas.values())
        hit = sig(pick["plan"]) in meas and meas[sig(pick["plan"])][0] == fastest
        picks.append(hit)
        errs = [abs(new[k]["plan"]["predicted_us"] - m) / m for k, (m, _) in meas.items() if k in new]
        old = [abs(p - m) / m for m, p in meas.values()]
        new_errs += errs
        old_errs += old
        print(f"{name}: pick = measured fastest: {hit}; median error {100 * statistics.median(errs):.1f}%"
              f" over {len(errs)} candidates (round 2: {100 * statistics.median(old):.1f}%)")
    print(f"all: picks {sum(picks)} of {len(picks)}; median error {100 * statistics.median(new_errs):.1f}%"
          f" (round 2: {100 * statistics.median(old_errs):.1f}%), worst {100 * max(new_errs):.1f}%"
          f" (round 2: {100 * max(old_errs):.1f}%)")


if __name__ == "__main__":
    main()
