#!/usr/bin/env python3
"""Round 1 of the planner protocol re-scored in sample with the round-2 planner (a check of the
direction of the model fixes, NOT a validation: the step figures come from round 1's own
measurements). For every decode case whose pool holds both the all-conventional candidate and
the embedding-only overlap candidate, the round-1 profile gets graph_step_us = the measured
all-conventional step and serial_overlap_step_us = the measured embedding-only plan; `megaops
plan` ranks again; each measured candidate is matched by its regions.
  python3 bench/results/2026-11-29-s5-insample/rescore.py [--megaops build/megaops]"""
import argparse, json, os, statistics, subprocess, sys, tempfile

R = "bench/results/2026-11-29-s5-call2/protocol"


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
        meas, conv, emb = {}, None, None
        for e in pool:
            m = json.load(open(f"{R}/measured/{name}_rank{e['rank']}.json"))
            m = m["results"][0]["ms_per_token_median"] * 1e3
            meas[sig(e["plan"])] = (m, e["plan"]["predicted_us"])
            ov = [r for r in e["plan"]["regions"] if r["backend"] != "conventional"]
            if not ov:
                conv = m
            if len(ov) == 1 and ov[0]["ops"] == [0, 0]:
                emb = m
        if conv is None or emb is None:
            print(f"{name}: pool lacks all-conventional or embedding-only; skipped")
            continue
        prof = json.load(open(f"{R}/profiles/profile_{preset}_{b}.json"))
        prof["graph_step_us"], prof["serial_overlap_step_us"] = conv, emb
        pf, po = os.path.join(tmp, "p.json"), os.path.join(tmp, "pool.json")
        json.dump(prof, open(pf, "w"))
        out = subprocess.run([args.megaops, "plan", "--preset", preset, "--batch", b[1:],
                              "--profile", pf, "--top", "0", "--pool", "400", "--pool-out", po],
                             capture_output=True, text=True, check=True).stdout
        new = {sig(e["plan"]): e for e in json.load(open(po))}
        pick = next(e for e in new.values() if "planner" in e["selected_by"])
        fastest = min(m for m, _ in meas.values())
        hit = sig(pick["plan"]) in meas and meas[sig(pick["plan"])][0] == fastest
        picks.append(hit)
        errs = [abs(new[k]["plan"]["predicted_us"] - m) / m for k, (m, _) in meas.items() if k in new]
        new_errs += errs
        old_errs += [abs(p - m) / m for m, p in meas.values()]
        print(f"{name}: pick = measured fastest: {hit}; median error {100 * statistics.median(errs):.1f}%"
              f" (round 1: {100 * statistics.median([abs(p - m) / m for m, p in meas.values()]):.1f}%)")
    print(f"{len(picks)} cases: picks = measured fastest in {sum(picks)}; median abs error "
          f"{100 * statistics.median(new_errs):.1f}% (round 1 on the same cases: "
          f"{100 * statistics.median(old_errs):.1f}%)")


if __name__ == "__main__":
    sys.exit(main())
