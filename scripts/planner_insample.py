#!/usr/bin/env python3
"""A planner protocol round re-scored in sample with the current planner: a check of the direction
of model changes, NOT a validation (the step figures come from the round's own measurements).

For every measured decode case, the round's profile gets graph_step_us = the measured
all-conventional step, and serial_overlap_step_us either
  --serial embedding: the measured embedding-only overlap plan (round 1: the profile had neither
  figure; cases whose pool lacks that plan are skipped), or
  --serial shift: the profile's own figure moved by as much as graph_step_us moved (round 2: the
  figures were timed over fewer steps than the measurement);
then `megaops plan` ranks again and each measured candidate is matched by its regions.
  python3 scripts/planner_insample.py --protocol PROTOCOL_DIR --serial shift
where PROTOCOL_DIR holds a round's profiles/, pools/ and measured/ (scripts/planner_protocol.sh
writes them; docs/planner-validation.md lists the rounds and their results)."""
import argparse, json, os, statistics, subprocess, tempfile


def candidate(entry):
    """The planner's description of a pool entry (regions by op index and backend): "candidate"
    since pool entries hold plans in the plan format (docs/plan-format.md), "plan" before."""
    return entry.get("candidate", entry["plan"])


def sig(c):
    return json.dumps([(r["ops"], r["backend"]) for r in c["regions"]])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--protocol", required=True, help="a protocol run: pools/, measured/, profiles/")
    ap.add_argument("--serial", choices=["embedding", "shift"], required=True)
    ap.add_argument("--megaops", default="build/megaops")
    args = ap.parse_args()
    R = args.protocol
    man = json.load(open(f"{R}/pools/manifest.json"))
    new_errs, old_errs, picks = [], [], []
    tmp = tempfile.mkdtemp()
    for c in man["cases"]:
        if c["candidates"] < 8:
            continue
        name = c["case"]
        preset, b, _ = name.rsplit("_", 2)
        pool = json.load(open(f"{R}/pools/{os.path.basename(c['pool'])}"))
        meas, conv, emb = {}, None, None
        for e in pool:
            m = json.load(open(f"{R}/measured/{name}_rank{e['rank']}.json"))
            m = m["results"][0]["ms_per_token_median"] * 1e3
            meas[sig(candidate(e))] = (m, e["plan"]["predicted_us"])
            ov = [r for r in candidate(e)["regions"] if r["backend"] != "conventional"]
            if not ov:
                conv = m
            if len(ov) == 1 and ov[0]["ops"] == [0, 0]:
                emb = m
        if conv is None or (args.serial == "embedding" and emb is None):
            print(f"{name}: pool lacks all-conventional or embedding-only; skipped")
            continue
        prof = json.load(open(f"{R}/profiles/profile_{preset}_{b}.json"))
        if args.serial == "embedding":
            prof["serial_overlap_step_us"] = emb
        else:
            prof["serial_overlap_step_us"] += conv - prof["graph_step_us"]
        prof["graph_step_us"] = conv
        pf, po = os.path.join(tmp, "p.json"), os.path.join(tmp, "pool.json")
        json.dump(prof, open(pf, "w"))
        subprocess.run([args.megaops, "plan", "--preset", preset, "--batch", b[1:], "--profile", pf,
                        "--top", "0", "--pool", "2000", "--pool-out", po],
                       capture_output=True, text=True, check=True)
        new = {sig(candidate(e)): e for e in json.load(open(po))}
        pick = next(e for e in new.values() if "planner" in e["selected_by"])
        fastest = min(m for m, _ in meas.values())
        hit = sig(candidate(pick)) in meas and meas[sig(candidate(pick))][0] == fastest
        picks.append(hit)
        errs = [abs(new[k]["plan"]["predicted_us"] - m) / m for k, (m, _) in meas.items() if k in new]
        old = [abs(p - m) / m for m, p in meas.values()]
        new_errs += errs
        old_errs += old
        print(f"{name}: pick = measured fastest: {hit}; median error {100 * statistics.median(errs):.1f}%"
              f" over {len(errs)} candidates (the round's own: {100 * statistics.median(old):.1f}%)")
    print(f"all: picks {sum(picks)} of {len(picks)}; median error {100 * statistics.median(new_errs):.1f}%"
          f" (the round's own: {100 * statistics.median(old_errs):.1f}%), worst "
          f"{100 * max(new_errs):.1f}% (the round's own: {100 * max(old_errs):.1f}%)")


if __name__ == "__main__":
    main()
