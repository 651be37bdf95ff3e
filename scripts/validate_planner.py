#!/usr/bin/env python3
"""The cut planner's validation protocol (docs/planner-validation.md, round 6), as steps.

  checkpoint (the GPU host)  a random-weight checkpoint of a custom config.json (`megaops
                      init-random --config`), so `megaops profile` / `bench --model` run an
                      architecture no preset has (bench/planner-unseen/).
  plan     (any CPU)  for every case (model x batch x objective), `megaops plan --pool N` on the
                      frozen profiles; one pool file per case and a manifest with the git sha.
                      Models: the presets (--presets) and custom configs (--configs DIR ...).
  measure  (the GPU)  `megaops bench --plan` for every candidate of every pool and, in the same
                      processes, a fixed set of references (conventional PDL off / on, the PDL
                      chain, the multi-stream overlap W=3; for TTFT both prefill paths), the
                      references spread among the candidates (--rounds 2: a second pass in
                      reverse order); resumable (--resume), with a stop time (--stop-after);
                      --check-only checks every bench command on a build without CUDA.
  report   (any CPU)  hit rate, regret against the fastest configuration measured in the case (pool
                      or reference), prediction error, the two simpler selectors, the goals with
                      pass / fail, the paper's categories per model; markdown, JSON and a plot.
                      Also reads rounds 1-5's folders (no references).

  selftest            checks the arithmetic, the grouping, the checkpoint step and a whole
                      plan + measure + report on synthetic data with a stand-in megaops (ctest).

Only the standard library is needed, and matplotlib for the plot (skipped when absent).
"""
import argparse
import copy
import glob
import hashlib
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
MIN_POOL = 8  # measured pool candidates a case needs to count

# The round's goals (docs/planner-validation.md), the ones the report judges (printed in it).
GOAL_HIT_RATE = 0.95          # pick = fastest measured (by anything) in this share of the cases
GOAL_WORST_REGRET = 0.02      # measured(pick) / fastest measured in the case - 1, worst case
GOAL_MEDIAN_ABS_ERROR = 0.08  # |predicted - measured| / measured over the pools' candidates

# Two compositions closer than this (relative) are a tie for the categories: the simpler one wins
# (all-conventional, then a whole-step backend, then a multi-region composition). Round 5's
# repeats spread 0.05-0.3%; two rounds of one H200 differ by up to 0.1% (2026-12-04-s27-call4).
CATEGORY_TIE = 0.005

# Composition classes, simplest first.
CLASSES = ["conventional", "whole_step", "multi_region"]
CLASS_SHORT = {"conventional": "C", "whole_step": "W", "multi_region": "M"}

# The references every case measures beside its pool ("the fastest configuration measured in the
# call by any backend or flag"), as megaops-plan v1 decode / prefill fields. TTFT: the layer
# prefill runs the prefill kernels whatever the decode backend (PDL may change its launches), the
# graph prefill replays the decode step, so each decode backend is a TTFT configuration of its own.
_CONV = {"backend": "conventional", "pdl": False}
_CONV_PDL = {"backend": "conventional", "pdl": True}
_CHAIN = {"backend": "pdl_chain"}  # default folds, one stream
_OVERLAP3 = {"backend": "overlap", "overlap_streams": 3}  # no regions: one overlap region
REFERENCES = {
    "step": [("conv", _CONV, "layers"), ("conv-pdl", _CONV_PDL, "layers"),
             ("chain", _CHAIN, "layers"), ("overlap3", _OVERLAP3, "layers")],
    "ttft": [("layers-conv", _CONV, "layers"), ("layers-conv-pdl", _CONV_PDL, "layers"),
             ("graph-conv", _CONV, "graph"), ("graph-conv-pdl", _CONV_PDL, "graph"),
             ("graph-chain", _CHAIN, "graph"), ("graph-overlap3", _OVERLAP3, "graph")],
}

# docs/plan-format.md's defaults, to tell two plan files that run the same configuration apart
# from two that do not (a reference equal to a pool candidate is measured once). Were one of these
# to drift from src/graph/plan.cpp, equal plans would only be measured twice, never merged wrongly.
PLAN_DEFAULTS = {
    "decode": {
        "backend": "conventional", "pdl": False, "overlap_streams": 3, "regions": [],
        "sharing": {"policy": "serial", "split": 0},
        "folds": {"norms": True, "silu": True, "silu_epilogue_min_inter": 8192, "rope": True},
        "chain_counter_waits": False, "early_trigger_o_proj": True, "greedy_in_lm_head": True,
        "conventional_arithmetic": True, "vendor_chunks": 1,
        "matmul": {"path": "auto", "stream_shapes": [], "stream_stages": 0,
                   "stream_kernel": "auto", "l2_evict_first": True, "tune": False},
    },
    "prefill": {"path": "layers", "chunk": 2048},
}
REGION_DEFAULTS = {"backend": "overlap", "cta_budget": 0}
# Fields that say what a plan is for, not how it runs.
PLAN_INFO_FIELDS = ("format", "version", "model", "batch", "gpu", "objective", "source",
                    "predicted_us")


def case_name(model, batch, objective):
    return f"{model}_b{batch}_{objective}"


def git_sha():
    # On the GPU machine the tree is a copy without .git: the binaries' sha comes with them.
    if os.environ.get("MEGAOPS_GIT_SHA"):
        return os.environ["MEGAOPS_GIT_SHA"]
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def pct(x, digits=2):
    return "-" if x is None else f"{100 * x:.{digits}f}%"


# ---------------------------------------------------------------------------------------------
# Plans: normal form, identity, executor groups, composition class


def _merge(defaults, given):
    out = copy.deepcopy(defaults)
    for k, v in given.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def normal_plan(plan):
    """The plan's run-shaping fields with every default filled in."""
    given = {k: v for k, v in plan.items() if k not in PLAN_INFO_FIELDS}
    p = _merge(PLAN_DEFAULTS, given)
    if "overlap_streams" not in plan.get("decode", {}) and p["decode"]["backend"] == "pdl_chain":
        p["decode"]["overlap_streams"] = 1
    p["decode"]["regions"] = [_merge(REGION_DEFAULTS, r) for r in p["decode"]["regions"]]
    return p


def plan_key(plan):
    """An id of the configuration a plan runs (its info fields left out)."""
    text = json.dumps(normal_plan(plan), sort_keys=True, separators=(",", ":"))
    return "p" + hashlib.sha1(text.encode()).hexdigest()[:10]


def executor_key(plan):
    """Plans with equal keys run on one `bench` executor (tools/cmd_bench.cpp, build_part): the
    matmul dispatch, greedy sampling and prefill chunk always; for the multi-stream and chain steps
    also their kind and settings (one overlap step per executor). Conventional plans: (common,
    None)."""
    p = normal_plan(plan)
    d = p["decode"]
    common = json.dumps([d["greedy_in_lm_head"], d["matmul"], p["prefill"]["chunk"]],
                        sort_keys=True)
    if d["backend"] == "conventional":
        return (common, None)
    part = json.dumps([d["backend"], d["overlap_streams"], d["folds"], d["chain_counter_waits"],
                       d["early_trigger_o_proj"], d["conventional_arithmetic"],
                       d["vendor_chunks"]], sort_keys=True)
    return (common, part)


def composition_class(plan, objective):
    """conventional: the conventional step without PDL (for TTFT, the layer prefill without PDL:
    its prefill kernels run whatever the decode backend); whole_step: one backend over the whole
    step (conventional + PDL, the PDL chain, one overlap region, a persistent megakernel);
    multi_region: two or more regions, at least one not conventional."""
    p = normal_plan(plan)
    d = p["decode"]
    if objective == "ttft" and p["prefill"]["path"] == "layers":
        return "whole_step" if d["backend"] == "conventional" and d["pdl"] else "conventional"
    if d["backend"] == "conventional":
        return "whole_step" if d["pdl"] else "conventional"
    if d["backend"] == "pdl_chain":
        return "whole_step"
    regions = d["regions"]
    if len(regions) >= 2 and any(r["backend"] != "conventional" for r in regions):
        return "multi_region"
    return "whole_step"


def describe_plan(plan, objective="step"):
    p = normal_plan(plan)
    d = p["decode"]
    if d["backend"] == "conventional":
        s = "conventional" + (" + PDL" if d["pdl"] else "")
    elif d["backend"] == "pdl_chain":
        f = d["folds"]
        folds = "+".join(k for k in ("norms", "silu", "rope") if f[k]) or "none"
        s = f"PDL chain, folds {folds}"
        epilogue = f["silu_epilogue_min_inter"]
        if epilogue != PLAN_DEFAULTS["decode"]["folds"]["silu_epilogue_min_inter"]:
            s += f", silu epilogue from {epilogue}"
    else:
        n = len(d["regions"])
        s = f"overlap W={d['overlap_streams']}" + (f", {n} regions" if n > 1 else ", whole step")
    if p["prefill"]["path"] == "graph":
        s = "graph prefill, " + s
    elif objective == "ttft":
        s = "layer prefill, " + s
    return s


def reference_plan(name, decode, prefill, model, batch, objective):
    return {"format": "megaops-plan", "version": 1, "model": model, "batch": batch,
            "objective": objective, "source": f"validate_planner.py reference {name}",
            "decode": dict(decode), "prefill": {"path": prefill}}


# ---------------------------------------------------------------------------------------------
# checkpoint: a random-weight HF checkpoint of a custom config.json


def write_checkpoint(megaops, config_path, out, seed=0, log=print):
    """A random-weight checkpoint of `config_path` in `out`, written by `megaops init-random
    --config` (bf16, tokenizer files included; `out` complete or absent). One already written from
    the same config text and seed is kept: `out`.source beside it holds their sha1."""
    with open(config_path, "rb") as f:
        stamp = hashlib.sha1(f.read() + f"seed {seed}".encode()).hexdigest()
    source = out.rstrip("/") + ".source"
    if os.path.isdir(out) and os.path.exists(source):
        with open(source) as f:
            if f.read().strip() == stamp:
                log(f"{out}: already written from {config_path}")
                return out
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    subprocess.run([megaops, "init-random", "--config", config_path, "--out", out, "--seed",
                    str(seed), "--force"], check=True, stdout=subprocess.DEVNULL)
    with open(source, "w") as f:
        f.write(stamp + "\n")
    log(f"{out}: written from {config_path}")
    return out


def cmd_checkpoint(args):
    for config_dir in args.configs:
        name = os.path.basename(os.path.normpath(config_dir))
        write_checkpoint(args.megaops, os.path.join(config_dir, "config.json"),
                         os.path.join(args.out, name), args.seed)


# ---------------------------------------------------------------------------------------------
# plan


def model_list(args):
    """(name, source, unseen): presets by name, custom configs by their directory's name."""
    models = [(p, {"preset": p}, False) for p in args.presets]
    for d in args.configs or []:
        if not os.path.exists(os.path.join(d, "config.json")):
            sys.exit(f"--configs {d}: no config.json there")
        models.append((os.path.basename(os.path.normpath(d)), {"config": d}, True))
    return models


def cmd_plan(args):
    os.makedirs(args.out, exist_ok=True)
    manifest = {"git_sha": git_sha(), "pool_size": args.pool, "prompt_tokens": PROMPT_TOKENS,
                "cases": []}
    for name, source, unseen in model_list(args):
        model_args = (["--preset", source["preset"]] if "preset" in source
                      else ["--model", source["config"]])
        for batch in args.batches:
            for objective in args.objectives:
                case = case_name(name, batch, objective)
                profile = os.path.join(args.profiles, f"profile_{name}_b{batch}.json")
                pool = os.path.join(args.out, case + ".json")
                cmd = [args.megaops, "plan", *model_args, "--batch", str(batch),
                       "--objective", objective, "--top", "0", "--pool", str(args.pool),
                       "--pool-out", pool]
                if os.path.exists(profile):
                    cmd += ["--profile", profile]
                else:
                    print(f"{case}: no profile {profile}; planning from first principles",
                          file=sys.stderr)
                # The kernel boundaries measured on the same GPU (`megaops bench-boundary`): the
                # cost model's plain and PDL boundary costs.
                boundary = os.path.join(args.profiles, "kernel_boundary.json")
                if os.path.exists(boundary):
                    cmd += ["--profile", boundary]
                if objective == "ttft":
                    # The graph prefill replays a decode step of min(64, batch x 32) rows: its
                    # profile is the step case of that batch (the protocol profiles 32 and 64).
                    cmd += ["--tokens", str(PROMPT_TOKENS)]
                    rows = min(64, batch * PROMPT_TOKENS)
                    replay = os.path.join(args.profiles, f"profile_{name}_b{rows}.json")
                    if rows != batch and os.path.exists(replay):
                        cmd += ["--profile", replay]
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                with open(pool) as f:
                    size = len(json.load(f))
                manifest["cases"].append({
                    "case": case, "model": name, "source": source, "unseen": unseen,
                    "batch": batch, "objective": objective, "pool": pool, "candidates": size,
                    "profile": profile if os.path.exists(profile) else None})
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"pools for {len(manifest['cases'])} cases in {args.out} (sha {manifest['git_sha']})")


def load_pool(pools_dir, case):
    # The manifest holds the planning machine's paths; the pool files sit beside it.
    with open(os.path.join(pools_dir, os.path.basename(case["pool"]))) as f:
        return json.load(f)


def case_fields(case):
    """Model, batch and objective of a manifest case (older manifests have only its name)."""
    if "objective" in case:
        return case["model"], case["batch"], case["objective"]
    model, b, objective = case["case"].rsplit("_", 2)
    return model, int(b[1:]), objective


# ---------------------------------------------------------------------------------------------
# measure: the schedule


def interleave(pool_keys, ref_keys):
    """Pool candidates with the references spread evenly among them."""
    out, m = list(pool_keys), len(ref_keys)
    for j, r in enumerate(ref_keys):
        out.insert(min(len(out), int((j + 0.5) * (len(pool_keys) + m) / m)), r)
    return out


def case_entries(case, pool, bench_model):
    """Every configuration a case measures: its pool's candidates and the references, each with
    the id of the configuration it runs (equal plans share one measurement)."""
    _, batch, objective = case_fields(case)
    entries = []
    for e in pool:
        plan = dict(e["plan"], model=bench_model)
        entries.append({"label": f"rank{e['rank']}", "kind": "pool", "rank": e["rank"],
                        "selected_by": e["selected_by"], "predicted_us": e["plan"].get(
                            "predicted_us"), "plan": plan})
    for name, decode, prefill in REFERENCES[objective]:
        entries.append({"label": f"ref-{name}", "kind": "reference", "rank": None,
                        "selected_by": [], "predicted_us": None,
                        "plan": reference_plan(name, decode, prefill, bench_model, batch,
                                               objective)})
    for e in entries:
        e["key"] = plan_key(e["plan"])
        e["class"] = composition_class(e["plan"], objective)
        e["describe"] = describe_plan(e["plan"], objective)
    return entries


def executor_groups(plans):
    """plans: {key: plan}. Groups of keys that one `bench` process runs: one per overlap-step
    kind; the conventional plans join the largest group they can (same common part), else form
    their own."""
    by_exec = {}
    for k, p in plans.items():
        by_exec.setdefault(executor_key(p), []).append(k)
    groups = {ek: ks for ek, ks in by_exec.items() if ek[1] is not None}
    for ek, ks in by_exec.items():
        if ek[1] is not None:
            continue
        fits = [g for g in groups if g[0] == ek[0]]
        if fits:
            best = max(fits, key=lambda g: (len(groups[g]), g[1]))
            groups[best] = ks + groups[best]
        else:
            groups[ek] = ks
    return [groups[g] for g in sorted(groups, key=lambda g: (g[1] is not None, g[1] or ""))]


def build_schedule(manifest, pools_dir, bench_models, rounds, min_pool=MIN_POOL, share=True):
    """The units `measure` runs: one `bench` process each. Per block (a model and objective):
    per case, one unit per executor group, the references spread among the candidates; a group of
    one plan that recurs unchanged in several cases of the block (typically the PDL chain
    reference) runs once for all their batches (`bench --batch 1,8,...`), in the middle of the
    block. With rounds, round 2 runs the block's units and each unit's plans in reverse order, so
    a linear drift in time weighs on every configuration alike."""
    cases, blocks = {}, {}
    for case in manifest["cases"]:
        model, batch, objective = case_fields(case)
        if case["candidates"] < min_pool:
            print(f"{case['case']}: pool of {case['candidates']} < {min_pool}, not measured",
                  file=sys.stderr)
            continue
        entries = case_entries(case, load_pool(pools_dir, case), bench_models[model])
        cases[case["case"]] = {"model": model, "batch": batch, "objective": objective,
                               "unseen": case.get("unseen", False), "entries": entries}
        blocks.setdefault((model, objective), []).append(case["case"])
    units = []
    for (model, objective), names in blocks.items():
        names.sort(key=lambda n: cases[n]["batch"])
        per_case = {}
        for n in names:
            plans, order_pool, order_ref = {}, [], []
            for e in cases[n]["entries"]:
                if e["key"] in plans:
                    continue
                plans[e["key"]] = e["plan"]
                (order_pool if e["kind"] == "pool" else order_ref).append(e["key"])
            order = interleave(order_pool, order_ref)
            groups = [sorted(g, key=order.index) for g in executor_groups(plans)]
            per_case[n] = (plans, groups)
        # Single-plan groups that recur: one unit over their batches.
        recurring = {}
        for n in names:
            plans, groups = per_case[n]
            for g in groups:
                if len(g) == 1 and executor_key(plans[g[0]])[1] is not None:
                    recurring.setdefault(g[0], []).append(n)
        shared = {k: ns for k, ns in recurring.items() if len(ns) >= 2 and share}
        shared_units = []
        for k, ns in shared.items():
            plan = per_case[ns[0]][0][k]
            shared_units.append({"name": f"{model}_{objective}_shared_{k}", "model": model,
                                 "objective": objective,
                                 "batches": [cases[n]["batch"] for n in ns],
                                 "cases": ns, "plans": [k], "plan_json": {k: plan}})
        case_units = []
        for n in names:
            plans, groups = per_case[n]
            groups = [g for g in groups if not (len(g) == 1 and g[0] in shared
                                                and n in shared[g[0]])]
            for gi, g in enumerate(groups):
                case_units.append({"name": f"{n}_g{gi}", "model": model, "objective": objective,
                                   "batches": [cases[n]["batch"]], "cases": [n], "plans": g,
                                   "plan_json": {k: plans[k] for k in g}})
        # The shared units in the middle of the block: on average they run when its cases do.
        half = (len(case_units) + 1) // 2
        block_units = case_units[:half] + shared_units + case_units[half:]
        for r in range(1, rounds + 1):
            forward = r % 2 == 1
            for u in (block_units if forward else reversed(block_units)):
                units.append(dict(u, round=r, plans=u["plans"] if forward
                                  else list(reversed(u["plans"]))))
    return cases, units


def unit_id(u):
    return f"r{u['round']}_{u['name']}"


def run_unit(args, u, bench_model_args, out_dir):
    """One bench process; returns (status, seconds)."""
    ttft = u["objective"] == "ttft"
    # A TTFT case times the prefill only: two new tokens (bench's least) and more repeats.
    gen = 2 if ttft else args.gen
    # The timed repeats of a configuration, spread over the rounds.
    repeats = -(-(args.ttft_repeats if ttft else args.repeats) // args.rounds)
    plan_dir = os.path.join(out_dir, "plans", unit_id(u))
    res_dir = os.path.join(out_dir, f"r{u['round']}", u["name"])
    os.makedirs(plan_dir, exist_ok=True)
    os.makedirs(res_dir, exist_ok=True)
    cmd = [args.megaops, "bench", *bench_model_args, "--batch",
           ",".join(str(b) for b in u["batches"]), "--prompt", str(PROMPT_TOKENS),
           "--gen", str(gen), "--repeats", str(repeats)]
    for k in u["plans"]:
        path = os.path.join(plan_dir, k + ".json")
        with open(path, "w") as f:
            json.dump(u["plan_json"][k], f, indent=1)
        cmd += ["--plan", path]
    # One plan: --json names the file; several: a folder, one file per plan, named like it.
    cmd += ["--json", os.path.join(res_dir, u["plans"][0] + ".json") if len(u["plans"]) == 1
            else res_dir]
    if args.check_only:
        # A build without CUDA reads and checks every plan, and that one executor can run them
        # all, before it says it has no GPU: what this unit would be refused for, found on a CPU.
        r = subprocess.run(cmd, capture_output=True, text=True)
        ok = r.returncode != 0 and ("no CUDA support" in r.stderr or "no CUDA device" in r.stderr)
        return ("ok" if ok else "refused: " + r.stderr.strip()[-300:]), 0.0
    started = time.time()
    # A unit that fails or hangs (the watchdog turns a hang into an error) is reported and left
    # unmeasured; the other units still run.
    try:
        with open(os.path.join(res_dir, "bench.log"), "w") as log:
            subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT,
                           timeout=args.case_timeout)
        status = "ok"
    except subprocess.CalledProcessError as e:
        status = f"failed (exit {e.returncode})"
    except subprocess.TimeoutExpired:
        status = f"ran past {args.case_timeout} s"
    return status, time.time() - started


def bench_models_of(manifest, checkpoints):
    """How bench names each model: a preset, or the checkpoint of a custom config (--checkpoints
    ROOT/<name>, else the config's directory, which then needs weights)."""
    out = {}
    for case in manifest["cases"]:
        model, _, _ = case_fields(case)
        source = case.get("source", {"preset": model})
        if "preset" in source:
            out[model] = ("preset", source["preset"])
        else:
            root = os.path.join(checkpoints, model) if checkpoints else source["config"]
            out[model] = ("model", root)
    return out


def cmd_measure(args):
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.pools, "manifest.json")) as f:
        manifest = json.load(f)
    models = bench_models_of(manifest, args.checkpoints)
    cases, units = build_schedule(manifest, args.pools, {m: v[1] for m, v in models.items()},
                                  args.rounds, args.min_pool, not args.no_shared)
    index = {"git_sha": manifest["git_sha"], "rounds": args.rounds, "gen": args.gen,
             "repeats": args.repeats, "ttft_repeats": args.ttft_repeats,
             "cases": {n: dict(c, entries=[{k: v for k, v in e.items() if k != "plan"}
                                           for e in c["entries"]]) for n, c in cases.items()},
             "units": [{k: v for k, v in u.items() if k != "plan_json"} for u in units]}
    with open(os.path.join(args.out, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
    status_dir = os.path.join(args.out, "status")
    os.makedirs(status_dir, exist_ok=True)
    t0, left = time.time(), 0
    print(f"measure: {len(units)} bench processes for {len(cases)} cases, {args.rounds} rounds",
          file=sys.stderr, flush=True)
    if args.check_only:
        with tempfile.TemporaryDirectory() as tmp:
            refused = [(unit_id(u), run_unit(args, u, [f"--{models[u['model']][0]}",
                                                       models[u["model"]][1]], tmp)[0])
                       for u in units]
        for name, status in refused:
            if status != "ok":
                print(f"{name}: {status}", file=sys.stderr)
        bad = sum(status != "ok" for _, status in refused)
        print(f"measure --check-only: {len(units) - bad} of {len(units)} bench commands accepted "
              "by a build without CUDA", file=sys.stderr)
        sys.exit(1 if bad else 0)
    for i, u in enumerate(units):
        status_path = os.path.join(status_dir, unit_id(u) + ".json")
        if args.resume and os.path.exists(status_path):
            with open(status_path) as f:
                if json.load(f)["status"] == "ok" or not args.retry_failed:
                    continue
        if args.stop_after and time.time() - t0 > args.stop_after:
            left = len(units) - i
            break
        kind, name = models[u["model"]]
        status, seconds = run_unit(args, u, [f"--{kind}", name], args.out)
        with open(status_path, "w") as f:
            json.dump({"unit": unit_id(u), "status": status, "seconds": round(seconds, 1),
                       "plans": len(u["plans"]), "batches": u["batches"]}, f)
        print(f"{unit_id(u)}: {len(u['plans'])} plans x {len(u['batches'])} batches, {status}, "
              f"{seconds:.0f} s", file=sys.stderr, flush=True)
    if left:
        print(f"measure: stopped after {args.stop_after} s with {left} of {len(units)} units "
              "left; run again with --resume (same --out) to continue", file=sys.stderr)
        sys.exit(3)


# ---------------------------------------------------------------------------------------------
# report: scoring


def measured_us(bench_json, objective, batch=None):
    """The row of `batch` (the first row without one): step in us, TTFT in us."""
    rows = bench_json["results"]
    row = next((r for r in rows if batch is None or r.get("batch") == batch), None)
    if row is None:
        return None
    return 1e3 * (row["ttft_ms_median"] if objective == "ttft" else row["ms_per_token_median"])


def row_samples(bench_json, objective, batch):
    """A row's timed repeats (us): every repeat's step time, or its TTFT median."""
    row = next((r for r in bench_json["results"] if r.get("batch") == batch), None)
    if row is None:
        return None
    if objective == "step" and row.get("ms_per_token_all"):
        return [1e3 * x for x in row["ms_per_token_all"]]
    return [1e3 * (row["ttft_ms_median"] if objective == "ttft" else row["ms_per_token_median"])]


def combine_rounds(per_round):
    """per_round: [[samples of round 1], [round 2], ...] -> (value, spread): the median of every
    repeat of every round, and (max - min) / min of the rounds' medians."""
    allv = [x for r in per_round for x in r]
    meds = [statistics.median(r) for r in per_round]
    spread = (max(meds) - min(meds)) / min(meds) if len(meds) > 1 else None
    return statistics.median(allv), spread


def winner_class(entries, fastest):
    """The simplest class among the configurations within CATEGORY_TIE of the fastest."""
    near = {e["class"] for e in entries if e["measured_us"] <= fastest * (1 + CATEGORY_TIE)}
    return next(c for c in CLASSES if c in near)


def score_case(entries, min_pool=MIN_POOL):
    """entries: [{label, kind, selected_by, predicted_us, measured_us, class}] of one case (pool
    candidates and references). Returns per-selector hit and regret against the fastest of all,
    the prediction errors of the pool's candidates, the winner and its class."""
    measured = [e for e in entries if e.get("measured_us") is not None]
    pool = [e for e in measured if e["kind"] == "pool"]
    out = {"pool_measured": len(pool), "measured": len(measured), "errors": [],
           "selectors": {}, "scored": len(pool) >= min_pool}
    if not measured:
        return out
    fastest_entry = min(measured, key=lambda e: e["measured_us"])
    fastest = fastest_entry["measured_us"]
    win = winner_class(measured, fastest)
    winner = min((e for e in measured if e["class"] == win), key=lambda e: e["measured_us"])
    out.update(fastest_us=fastest, fastest_label=fastest_entry["label"],
               fastest_describe=fastest_entry.get("describe", ""), winner_class=win,
               winner_label=winner["label"], winner_describe=winner.get("describe", ""),
               winner_us=winner["measured_us"])
    if pool:
        out["pool_fastest_us"] = min(e["measured_us"] for e in pool)
    for e in pool:
        if e.get("predicted_us") is not None:
            out["errors"].append(abs(e["predicted_us"] - e["measured_us"]) / e["measured_us"])
    conv = [e["measured_us"] for e in measured if e["class"] == "conventional"]
    other = [e["measured_us"] for e in measured if e["class"] != "conventional"]
    if conv and other:
        # > 0: the best composition that removes boundaries beats the best all-conventional one.
        out["lead"] = min(conv) / min(other) - 1.0
    for sel in SELECTORS:
        picked = [e for e in pool if sel in e["selected_by"]]
        if not picked:
            continue
        m = picked[0]["measured_us"]
        out["selectors"][sel] = {"hit": m == fastest, "regret": m / fastest - 1.0,
                                 "pool_regret": m / out["pool_fastest_us"] - 1.0,
                                 "label": picked[0]["label"], "measured_us": m,
                                 "predicted_us": picked[0].get("predicted_us"),
                                 "describe": picked[0].get("describe", "")}
    return out


def summarize(cases, planned=None):
    """cases: {name: score_case output}; planned: how many cases the manifest has (an unmeasured
    case counts as a miss). Returns the overall figures per selector."""
    scored = {n: c for n, c in cases.items() if c["scored"]}
    planned = len(cases) if planned is None else planned
    summary = {"planned": planned, "scored": len(scored)}
    for sel in SELECTORS:
        s = [c["selectors"][sel] for c in scored.values() if sel in c["selectors"]]
        if not s:
            continue
        summary[sel] = {"cases": len(s), "hits": sum(x["hit"] for x in s),
                        "hit_rate": sum(x["hit"] for x in s) / planned if planned else 0.0,
                        "within_1pct": sum(x["regret"] <= 0.01 for x in s),
                        "worst_regret": max(x["regret"] for x in s),
                        "median_regret": statistics.median(x["regret"] for x in s)}
    errors = [e for c in scored.values() for e in c["errors"]]
    summary["errors"] = len(errors)
    summary["median_abs_error"] = statistics.median(errors) if errors else None
    summary["worst_abs_error"] = max(errors) if errors else None
    return summary


def goals(summary):
    """The round's three goals: [(name, value, target, met)]. Worst regret is only
    met when every planned case was scored with its pick measured (else a regret is unknown)."""
    p = summary.get("planner")
    # Every planned case scored with the pick measured: else a regret is unknown.
    complete = p is not None and p["cases"] == summary["planned"] > 0
    hit = p["hit_rate"] if p else 0.0
    worst = p["worst_regret"] if p else None
    med = summary["median_abs_error"]
    return [
        ("pick = measured fastest", hit, f">= {pct(GOAL_HIT_RATE, 0)}", hit >= GOAL_HIT_RATE),
        ("worst regret", worst, f"<= {pct(GOAL_WORST_REGRET, 0)}",
         complete and worst is not None and worst <= GOAL_WORST_REGRET),
        ("median |prediction error|", med, f"<= {pct(GOAL_MEDIAN_ABS_ERROR, 0)}",
         med is not None and med <= GOAL_MEDIAN_ABS_ERROR),
    ]


CATEGORY_TEXT = (
    "The cut-planner paper's categories say how a model's best composition changes with the "
    "batch. Here a case is *won* by the simplest class within "
    f"{pct(CATEGORY_TIE, 1)} of the fastest configuration measured in it (C = all-conventional: "
    "the conventional step without PDL; for TTFT the layer prefill without PDL, or the graph "
    "prefill over the conventional step without PDL; W = one backend "
    "over the whole step: conventional + PDL, the PDL chain, one overlap region, a persistent "
    "megakernel; M = a multi-region composition: two or more regions, one at least not "
    "conventional). W and M are the paper's megakernel side (compositions that remove kernel "
    "boundaries); over a model's batches, in increasing order: **stable** = W or M wins at every "
    "batch; **receding** = W or M wins at the small batches, C at the large ones; **advancing** "
    "= C wins at the small batches, W or M at the large ones; **averse** = C wins at every batch; "
    "**mixed** = none of these (the winner changes more than once). Lead = fastest C / fastest W "
    "or M - 1 (> 0: removing boundaries pays).")


def category(wins):
    """wins: per batch in increasing order, True where W or M won. The paper's category."""
    if all(wins):
        return "stable"
    if not any(wins):
        return "averse"
    first_loss = wins.index(False)
    if wins[0] and not any(wins[first_loss:]):
        return "receding"
    first_win = wins.index(True)
    if not wins[0] and all(wins[first_win:]):
        return "advancing"
    return "mixed"


def categories(scores, meta):
    """Per (model, objective): the winners by batch and the category."""
    out = {}
    for name, c in scores.items():
        if "winner_class" not in c:
            continue
        m = meta[name]
        out.setdefault((m["model"], m["objective"]), []).append((m["batch"], c))
    result = {}
    for key, rows in out.items():
        rows.sort(key=lambda r: r[0])
        wins = [c["winner_class"] != "conventional" for _, c in rows]
        result[key] = {"batches": [b for b, _ in rows],
                       "winners": [c["winner_class"] for _, c in rows],
                       "labels": [c.get("winner_describe", "") for _, c in rows],
                       "leads": [c.get("lead") for _, c in rows],
                       "category": category(wins)}
    return result


# ---------------------------------------------------------------------------------------------
# report: reading the measurements


def load_round6(measured_dir, pools_dir):
    """Scores of a measure run with references (index.json): ({case: entries}, {case: meta},
    {case: round spread}, unit failures)."""
    with open(os.path.join(measured_dir, "index.json")) as f:
        index = json.load(f)
    files = {}  # (case, key) -> [(round, path)]
    failures = []
    for u in index["units"]:
        res = os.path.join(measured_dir, f"r{u['round']}", u["name"])
        sp = os.path.join(measured_dir, "status", unit_id(u) + ".json")
        if os.path.exists(sp):
            with open(sp) as f:
                st = json.load(f)
            if st["status"] != "ok":
                failures.append(f"{unit_id(u)}: {st['status']}")
        for n in u["cases"]:
            for k in u["plans"]:
                files.setdefault((n, k), []).append((u["round"], os.path.join(res, k + ".json")))
    entries_of, meta, spreads = {}, {}, {}
    for n, c in index["cases"].items():
        meta[n] = {k: c[k] for k in ("model", "batch", "objective", "unseen")}
        value = {}
        for e in c["entries"]:
            if e["key"] in value:
                continue
            per_round = []
            for _, path in sorted(files.get((n, e["key"]), [])):
                if os.path.exists(path):
                    with open(path) as f:
                        s = row_samples(json.load(f), c["objective"], c["batch"])
                    if s:
                        per_round.append(s)
            value[e["key"]] = combine_rounds(per_round) if per_round else (None, None)
        entries_of[n] = [dict(e, measured_us=value[e["key"]][0]) for e in c["entries"]]
        sp = [v[1] for v in value.values() if v[1] is not None]
        spreads[n] = max(sp) if sp else None
    return entries_of, meta, spreads, failures, index


def legacy_plan(plan):
    """A plan of rounds 1-5's pools (before the megaops-plan format: regions with backends, a
    prefill string) in the fields composition_class and describe_plan read."""
    if "format" in plan:
        return plan
    regions = plan.get("regions", [])
    decode = {"backend": "conventional"}
    if any(r.get("backend") != "conventional" for r in regions):
        decode = {"backend": "overlap", "regions": [
            {"first_op": r.get("first_op", ""), "backend": r.get("backend", "overlap")}
            for r in regions]}
    prefill = plan.get("prefill", "layers")
    return {"decode": decode, "prefill": {"path": prefill} if isinstance(prefill, str) else prefill}


def load_legacy(measured_dir, pools_dir):
    """Rounds 1-5's layout: <case>_rank<r>.json per candidate, no references."""
    with open(os.path.join(pools_dir, "manifest.json")) as f:
        manifest = json.load(f)
    entries_of, meta = {}, {}
    for case in manifest["cases"]:
        model, batch, objective = case_fields(case)
        meta[case["case"]] = {"model": model, "batch": batch, "objective": objective,
                              "unseen": case.get("unseen", False)}
        entries = []
        for entry in load_pool(pools_dir, case):
            path = os.path.join(measured_dir, f"{case['case']}_rank{entry['rank']}.json")
            m = None
            if os.path.exists(path):
                with open(path) as f:
                    m = measured_us(json.load(f), objective)
            entries.append({"label": f"rank{entry['rank']}", "kind": "pool",
                            "selected_by": entry["selected_by"],
                            "predicted_us": entry["plan"]["predicted_us"], "measured_us": m,
                            "class": composition_class(legacy_plan(entry["plan"]), objective),
                            "describe": describe_plan(legacy_plan(entry["plan"]), objective)})
        entries_of[case["case"]] = entries
    return entries_of, meta, {}, [], {"rounds": 1, "legacy": True}


def cmd_report(args):
    with open(os.path.join(args.pools, "manifest.json")) as f:
        manifest = json.load(f)
    loader = (load_round6 if os.path.exists(os.path.join(args.measured, "index.json"))
              else load_legacy)
    entries_of, meta, spreads, failures, index = loader(args.measured, args.pools)
    planned = {c["case"] for c in manifest["cases"]}
    for c in manifest["cases"]:  # cases left out of the schedule (pool too small) still count
        if c["case"] not in meta:
            model, batch, objective = case_fields(c)
            meta[c["case"]] = {"model": model, "batch": batch, "objective": objective,
                               "unseen": c.get("unseen", False)}
    scores = {n: score_case(entries_of.get(n, []), args.min_pool) for n in sorted(planned)}
    order = [c["case"] for c in manifest["cases"]]
    summary = summarize(scores, len(planned))
    refs = ("no references (rounds 1-5's layout: the fastest is the pool's)"
            if index.get("legacy") else
            "every case also measured the references ("
            + "; ".join(f"{o}: {', '.join(r[0] for r in REFERENCES[o])}" for o in OBJECTIVES
                        if any(m["objective"] == o for m in meta.values()))
            + f") in the same processes, {index.get('rounds', 1)} round(s)")
    lines = [f"# Planner validation (pools frozen at {manifest['git_sha']})", "",
             f"{summary['scored']} of {summary['planned']} cases measured with a pool of at least "
             f"{args.min_pool} candidates; {refs}. Regret and pick = fastest are against the "
             "fastest configuration measured in the case by anything (pool or reference); an "
             "unmeasured case counts as a miss.", ""]
    lines += ["## Goals", "", "| goal | measured | target | met |",
              "| --- | --- | --- | --- |"]
    for name, value, target, met in goals(summary):
        lines.append(f"| {name} | {pct(value, 2) if value is not None else '-'} | {target} | "
                     f"{'yes' if met else 'NO'} |")

    def selector_table(part, title):
        out = [f"| {title} | selector | cases scored | pick = fastest | within 1% | "
               "worst regret | median regret |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for label, s in part:
            for sel in SELECTORS:
                if sel in s:
                    x = s[sel]
                    out.append(f"| {label} | {sel} | {x['cases']} / {s['planned']} | "
                               f"{x['hits']} ({pct(x['hit_rate'], 0)}) | {x['within_1pct']} | "
                               f"{pct(x['worst_regret'])} | {pct(x['median_regret'])} |")
        return out

    parts = [("all", summary)]
    for objective in OBJECTIVES:
        sub = {n: s for n, s in scores.items() if meta[n]["objective"] == objective}
        if sub and len(sub) < len(scores):
            parts.append((objective, summarize(sub)))
    for label, flag in (("presets", False), ("unseen architectures", True)):
        sub = {n: s for n, s in scores.items() if meta[n]["unseen"] == flag}
        if sub and len(sub) < len(scores):
            parts.append((label, summarize(sub)))
    lines += ["", "## Selectors", ""] + selector_table(parts, "cases")
    lines += ["", "Prediction error |predicted - measured| / measured over the pools' measured "
              "candidates: " + ", ".join(
                  f"{label} median {pct(s['median_abs_error'], 1)} worst "
                  f"{pct(s['worst_abs_error'], 1)} ({s['errors']})"
                  for label, s in parts if s["median_abs_error"] is not None) + "."]
    sp = [v for v in spreads.values() if v is not None]
    if sp:
        lines += ["", f"Round-to-round spread of one configuration's median (drift and noise): "
                      f"median {pct(statistics.median(sp))}, worst {pct(max(sp))} (per case: "
                      "the largest over its configurations)."]
    if failures:
        lines += ["", "Bench processes that did not finish: " + "; ".join(failures) + "."]
    unprofiled = [c["case"] for c in manifest["cases"] if "profile" in c and not c["profile"]]
    if unprofiled:
        lines += ["", "Planned without a profile (first-principles estimates): "
                  + ", ".join(unprofiled) + "."]

    lines += ["", "## Cases", "",
              "| case | pool | planner's pick | measured (us) | fastest measured | (us) | regret | "
              "error of pick | pool's error median / worst | additive: regret | no-overlap: "
              "regret | winner | spread |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for n in order:
        c = scores[n]
        if "fastest_us" not in c:
            lines.append(f"| {n} | {c['pool_measured']} | not measured | | | | | | | | | | |")
            continue
        sel = c["selectors"]

        def sel_cell(s):
            if s not in sel:
                return "-"
            return ("hit" if sel[s]["hit"] else "miss") + f" {pct(sel[s]['regret'])}"
        p = sel.get("planner")
        err = (abs(p["predicted_us"] - p["measured_us"]) / p["measured_us"]
               if p and p.get("predicted_us") is not None else None)
        errs = (f"{pct(statistics.median(c['errors']), 1)} / {pct(max(c['errors']), 1)}"
                if c["errors"] else "-")
        lines.append(
            f"| {n}{'' if c['scored'] else ' (pool < ' + str(args.min_pool) + ')'} | "
            f"{c['pool_measured']} | {p['label'] + ': ' + p['describe'] if p else '-'} | "
            f"{p['measured_us']:.1f} | {c['fastest_label']}: {c['fastest_describe']} | "
            f"{c['fastest_us']:.1f} | {pct(p['regret']) if p else '-'} | {pct(err, 1)} | "
            f"{errs} | {sel_cell('additive')} | {sel_cell('no_overlap')} | "
            f"{CLASS_SHORT[c['winner_class']]} | {pct(spreads.get(n))} |"
            if p else f"| {n} | {c['pool_measured']} | no pick measured | | | | | | | | | | |")

    cats = categories(scores, meta)
    lines += ["", "## Categories", "", CATEGORY_TEXT, "",
              "| model | objective | winners by batch | lead by batch | category |",
              "| --- | --- | --- | --- | --- |"]
    for (model, objective), v in sorted(cats.items()):
        winners = ", ".join(f"b{b} {CLASS_SHORT[w]} ({lab})"
                            for b, w, lab in zip(v["batches"], v["winners"], v["labels"]))
        leads = ", ".join(f"b{b} {pct(l, 1)}" for b, l in zip(v["batches"], v["leads"]))
        lines.append(f"| {model} | {objective} | {winners} | {leads} | {v['category']} |")
    for cls, what in (("multi_region", "a multi-region composition (M)"),
                      ("whole_step", "a single whole-step backend (W)"),
                      ("conventional", "all-conventional (C)")):
        won = [n for n in order if scores[n].get("winner_class") == cls]
        lines += ["", f"Cases {what} wins: " + (", ".join(won) or "none") + "."]

    text = "\n".join(lines) + "\n"
    with open(args.out, "w") as f:
        f.write(text)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"git_sha": manifest["git_sha"], "summary": summary,
                       "goals": [{"goal": g[0], "value": g[1], "target": g[2], "met": g[3]}
                                 for g in goals(summary)],
                       "cases": scores, "spreads": spreads, "failures": failures,
                       "categories": {f"{m}/{o}": v for (m, o), v in cats.items()}},
                      f, indent=1)
    if args.plot:
        plot(args.plot, entries_of, meta)


def plot(path, entries_of, meta):
    points = [(e["predicted_us"], e["measured_us"], meta[n]["objective"], meta[n]["unseen"])
              for n, es in entries_of.items() for e in es
              if e["kind"] == "pool" and e.get("predicted_us") is not None
              and e.get("measured_us") is not None]
    if not points:
        return
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
        for unseen, marker in ((False, "o"), (True, "^")):
            xs = [p[0] for p in points if p[2] == objective and p[3] == unseen]
            ys = [p[1] for p in points if p[2] == objective and p[3] == unseen]
            if xs:
                plt.scatter(xs, ys, s=10, marker=marker,
                            label=f"{objective}{', unseen' if unseen else ''} ({len(xs)})")
    plt.plot([lo, hi], [lo, hi], "k--", linewidth=0.8)
    plt.xscale("log")
    plt.yscale("log")
    plt.xlim(lo, hi)
    plt.ylim(lo, hi)
    plt.legend()
    plt.xlabel("predicted (us)")
    plt.ylabel("measured (us)")
    plt.title("cut planner: predicted vs measured")
    plt.savefig(path, dpi=120, bbox_inches="tight")


# ---------------------------------------------------------------------------------------------
# selftest

# A stand-in for `megaops bench` and `megaops plan` (test only): bench writes bench-format JSON
# with a time per configuration from a table the test controls; plan writes a pool.
FAKE_MEGAOPS = r'''#!/usr/bin/env python3
import hashlib, json, os, sys
args = sys.argv[1:]
def opt(name, default=None):
    return args[args.index(name) + 1] if name in args else default
def opts(name):
    return [args[i + 1] for i, a in enumerate(args) if a == name]
if args[0] == "plan":
    pool = json.load(open(os.environ["FAKE_POOL"]))
    b = int(opt("--batch"))
    for e in pool:
        e["plan"]["batch"] = b
        e["plan"]["objective"] = opt("--objective")
    json.dump(pool, open(opt("--pool-out"), "w"))
    sys.exit(0)
assert args[0] == "bench"
table = json.load(open(os.environ["FAKE_TIMES"]))
plans, batches = opts("--plan"), [int(x) for x in opt("--batch").split(",")]
if "--preset" in args and opt("--preset") == "broken":
    sys.exit(1)
# bench's order: conventional plans first (the carveout rule of tools/cmd_bench.cpp)
loaded = [(p, json.load(open(p))) for p in plans]
loaded.sort(key=lambda x: x[1].get("decode", {}).get("backend", "conventional") != "conventional")
with open(os.environ["FAKE_LOG"], "a") as log:
    for p, plan in loaded:
        log.write(os.path.basename(p) + "\n")
ttft = opt("--gen") == "2"
out = opt("--json")
for p, plan in loaded:
    rows = []
    for b in batches:
        ms = table[os.path.basename(p)[:-5]][str(b)]
        rows.append({"batch": b, "ms_per_token_median": ms, "ms_per_token_all": [ms] *
                     int(opt("--repeats")), "ttft_ms_median": ms, "plan": plan})
    path = out if len(plans) == 1 else os.path.join(out, os.path.basename(p))
    json.dump({"git_sha": "fake", "results": rows}, open(path, "w"))
'''


def _selftest_scoring():
    # One case, three pool candidates and two references: the planner picks the pool's fastest,
    # but a reference (the PDL chain) is 1% faster still, so the pick misses with regret 1%.
    entries = [
        {"label": "rank1", "kind": "pool", "selected_by": ["planner"], "predicted_us": 110.0,
         "measured_us": 101.0, "class": "conventional"},
        {"label": "rank2", "kind": "pool", "selected_by": ["additive"], "predicted_us": 105.0,
         "measured_us": 105.0, "class": "multi_region"},
        {"label": "rank3", "kind": "pool", "selected_by": ["no_overlap"], "predicted_us": 144.0,
         "measured_us": 120.0, "class": "whole_step"},
        {"label": "ref-chain", "kind": "reference", "selected_by": [], "predicted_us": None,
         "measured_us": 100.0, "class": "whole_step"},
        {"label": "ref-conv-pdl", "kind": "reference", "selected_by": [], "predicted_us": None,
         "measured_us": None, "class": "whole_step"},
    ]
    c = score_case(entries, min_pool=3)
    assert c["scored"] and c["pool_measured"] == 3 and c["measured"] == 4
    assert c["fastest_us"] == 100.0 and c["fastest_label"] == "ref-chain"
    assert not c["selectors"]["planner"]["hit"]
    assert abs(c["selectors"]["planner"]["regret"] - 0.01) < 1e-12
    assert c["selectors"]["planner"]["pool_regret"] == 0.0
    assert abs(c["selectors"]["additive"]["regret"] - 0.05) < 1e-12
    assert abs(c["selectors"]["no_overlap"]["regret"] - 0.2) < 1e-12
    # Errors only over the pool: 110/101, 0, 144/120.
    assert len(c["errors"]) == 3 and abs(max(c["errors"]) - 0.2) < 1e-12
    # The chain (W) is 1% faster than all-conventional: outside the tie, W wins; lead 1%.
    assert c["winner_class"] == "whole_step" and abs(c["lead"] - 0.01) < 1e-12
    # Within the tie the simpler class wins, and names the configuration that won.
    tie = score_case([dict(entries[0], measured_us=100.3), dict(entries[3])], min_pool=1)
    assert tie["winner_class"] == "conventional" and tie["winner_label"] == "rank1"
    assert tie["fastest_label"] == "ref-chain"
    # A case whose pick is the fastest reference's own plan (same measurement) is a hit.
    hit = score_case([dict(entries[0], measured_us=100.0), entries[3]], min_pool=1)
    assert hit["selectors"]["planner"]["hit"] and hit["selectors"]["planner"]["regret"] == 0.0
    # Summaries: an unmeasured case (planned 2, scored 1) is a miss in the hit rate and makes
    # the worst-regret goal unmet (its regret is unknown).
    s = summarize({"a": hit}, planned=2)
    assert s["planner"]["hits"] == 1 and s["planner"]["hit_rate"] == 0.5
    g = {name: met for name, _, _, met in goals(s)}
    assert not g["pick = measured fastest"] and not g["worst regret"]
    s = summarize({"a": hit, "b": hit})
    g = {name: met for name, _, _, met in goals(s)}
    assert g["pick = measured fastest"] and g["worst regret"]
    assert g["median |prediction error|"] is False  # 110 vs 100: 10% > 8%
    # A case scored (its pool measured) whose pick's run failed: the regret goal cannot be met.
    lost = score_case([dict(entries[0], measured_us=None), dict(entries[1]), dict(entries[2])],
                      min_pool=2)
    assert lost["scored"] and "planner" not in lost["selectors"]
    g = {name: met for name, _, _, met in goals(summarize({"a": hit, "b": lost}))}
    assert not g["worst regret"] and not g["pick = measured fastest"]
    s = summarize({"a": c, "b": hit})
    assert s["planner"]["hits"] == 1 and abs(s["planner"]["worst_regret"] - 0.01) < 1e-12
    assert abs(s["median_abs_error"] - (9 / 101 + 0.1) / 2) < 1e-12  # errors 9/101, 0, .2, .1
    # The goals at their limits: 95% hits, 2% regret, 8% error pass; a hair beyond fails.
    edge = {"planner": {"hit_rate": 0.95, "worst_regret": 0.02, "cases": 20}, "scored": 20,
            "planned": 20,
            "median_abs_error": 0.08}
    assert all(met for *_, met in goals(edge))
    edge["planner"]["worst_regret"] = 0.0201
    assert not goals(edge)[1][3]
    assert measured_us({"results": [{"ms_per_token_median": 1.5, "ttft_ms_median": 2.0}]},
                       "ttft") == 2000.0
    assert measured_us({"results": [{"batch": 1, "ms_per_token_median": 1.0},
                                    {"batch": 8, "ms_per_token_median": 1.5}]},
                       "step", 8) == 1500.0
    v, spread = combine_rounds([[100.0, 102.0], [104.0, 106.0]])
    assert v == 103.0 and abs(spread - 4.0 / 101.0) < 1e-12


def _selftest_categories():
    assert category([True, True, True, True]) == "stable"
    assert category([False, False, False, False]) == "averse"
    assert category([True, True, False, False]) == "receding"
    assert category([True, False, False, False]) == "receding"
    assert category([False, False, True, True]) == "advancing"
    assert category([True, False, True, False]) == "mixed"
    assert category([False, True, False, True]) == "mixed"
    chain = {"decode": {"backend": "pdl_chain"}}
    regions = {"decode": {"backend": "overlap", "regions": [
        {"first_op": "embedding", "backend": "overlap"},
        {"first_op": "layer 0 qkv_rope", "backend": "conventional"}]}}
    one_region = {"decode": {"backend": "overlap", "regions": [{"first_op": "embedding"}]}}
    conv_regions = {"decode": {"backend": "overlap", "regions": [
        {"first_op": "embedding", "backend": "conventional"},
        {"first_op": "final_norm", "backend": "conventional"}]}}
    assert composition_class({}, "step") == "conventional"
    assert composition_class({"decode": _CONV_PDL}, "step") == "whole_step"
    assert composition_class(chain, "step") == "whole_step"
    assert composition_class({"decode": _OVERLAP3}, "step") == "whole_step"
    assert composition_class(one_region, "step") == "whole_step"
    assert composition_class(conv_regions, "step") == "whole_step"
    assert composition_class(regions, "step") == "multi_region"
    # TTFT: the layer prefill is all-conventional whatever the decode step; the graph prefill is
    # its decode step's class.
    assert composition_class(dict(regions, prefill={"path": "layers"}), "ttft") == "conventional"
    assert composition_class(dict(regions, prefill={"path": "graph"}), "ttft") == "multi_region"
    # Identity: a plan with every default written equals the minimal one; the chain's default
    # stream count differs from the overlap step's.
    full = normal_plan({"decode": {"backend": "conventional"}})
    assert plan_key(dict(full, model="x", batch=8, source="y", predicted_us=3.0)) == plan_key({})
    assert plan_key(chain) == plan_key({"decode": {"backend": "pdl_chain",
                                                   "overlap_streams": 1}})
    assert plan_key(one_region) != plan_key(regions)
    # Executor groups: conventional plans join the overlap step's group; a chain runs apart.
    plans = {"a": {}, "b": {"decode": _CONV_PDL}, "c": {"decode": _OVERLAP3}, "d": regions,
             "e": chain}
    groups = executor_groups(plans)
    assert sorted(map(sorted, groups)) == [["a", "b", "c", "d"], ["e"]]
    assert interleave(["1", "2", "3", "4"], ["r", "s"]) == ["1", "r", "2", "3", "s", "4"]
    # Categories from scores: b1 W, b8 C -> receding.
    meta = {"x1": {"model": "m", "objective": "step", "batch": 1},
            "x8": {"model": "m", "objective": "step", "batch": 8}}
    cats = categories({"x1": {"winner_class": "whole_step"},
                       "x8": {"winner_class": "conventional"}}, meta)
    assert cats[("m", "step")]["category"] == "receding"


def _selftest_checkpoint(tmp):
    """The checkpoint step runs `megaops init-random --config` once per config and seed."""
    fake = os.path.join(tmp, "fake-init-random")
    log = os.path.join(tmp, "init-random.log")
    with open(fake, "w") as f:
        f.write("#!/usr/bin/env python3\nimport os, shutil, sys\n"
                "a = sys.argv[1:]\nassert a[0] == 'init-random', a\n"
                "out = a[a.index('--out') + 1]\nos.makedirs(out, exist_ok=True)\n"
                "shutil.copy(a[a.index('--config') + 1], os.path.join(out, 'config.json'))\n"
                f"open({log!r}, 'a').write(' '.join(a) + '\\n')\n")
    os.chmod(fake, 0o755)
    os.makedirs(os.path.join(tmp, "cfg"))
    config = os.path.join(tmp, "cfg", "config.json")
    with open(config, "w") as f:
        json.dump({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 16}, f)
    quiet = lambda *_: None  # noqa: E731
    out = os.path.join(tmp, "ckpt", "cfg")
    assert write_checkpoint(fake, config, out, log=quiet) == out
    assert os.path.exists(os.path.join(out, "config.json"))
    write_checkpoint(fake, config, out, log=quiet)  # the same config and seed: kept
    write_checkpoint(fake, config, out, seed=1, log=quiet)  # another seed: written again
    with open(log) as f:
        calls = f.read().splitlines()
    assert len(calls) == 2, calls
    assert calls[0].endswith(f"--config {config} --out {out} --seed 0 --force"), calls
    assert "--seed 1" in calls[1], calls


def _selftest_measure(tmp):
    """plan -> measure -> report with the stand-in megaops: two presets, one of them broken."""
    fake = os.path.join(tmp, "megaops")
    with open(fake, "w") as f:
        f.write(FAKE_MEGAOPS)
    os.chmod(fake, 0o755)
    regions = [{"first_op": "embedding", "backend": "overlap"},
               {"first_op": "layer 0 qkv_rope", "backend": "conventional"}]
    pool = []
    for r in range(1, 10):  # 9 candidates: all-conventional, conventional + PDL, 7 overlap plans
        decode = ({"backend": "conventional"} if r == 1 else
                  {"backend": "conventional", "pdl": True} if r == 2 else
                  {"backend": "overlap", "overlap_streams": 3,
                   "regions": regions + [{"first_op": f"layer {r} o_proj",
                                          "backend": "overlap"}]})
        pool.append({"rank": r, "selected_by": (["planner"] if r == 2 else []) +
                     (["additive", "no_overlap"] if r == 9 else []) +
                     (["baseline"] if r == 1 else []),
                     "plan": {"format": "megaops-plan", "version": 1, "model": "m",
                              "predicted_us": 1000.0 + 10 * r, "decode": decode}})
    with open(os.path.join(tmp, "pool.json"), "w") as f:
        json.dump(pool, f)
    os.makedirs(os.path.join(tmp, "profiles"))
    env = dict(os.environ, FAKE_POOL=os.path.join(tmp, "pool.json"),
               FAKE_TIMES=os.path.join(tmp, "times.json"), FAKE_LOG=os.path.join(tmp, "log"))
    me = os.path.abspath(__file__)

    def run(*a, check=True):
        r = subprocess.run([sys.executable, me, *a], env=env, capture_output=True, text=True)
        assert r.returncode == 0 or not check, r.stderr
        return r
    pools = os.path.join(tmp, "pools")
    run("plan", "--megaops", fake, "--profiles", os.path.join(tmp, "profiles"), "--out", pools,
        "--presets", "p", "broken", "--batches", "1", "8", "--objectives", "step")
    with open(os.path.join(pools, "manifest.json")) as f:
        manifest = json.load(f)
    assert [c["case"] for c in manifest["cases"]] == ["p_b1_step", "p_b8_step",
                                                     "broken_b1_step", "broken_b8_step"]
    # Times (ms): pool rank r takes 1 + r/1000 except rank 2 (the pick, conventional + PDL):
    # 1.0005 at b1 (fastest of the pool), and the chain reference 0.99 at b1, 1.5 at b8.
    cases, units = build_schedule(manifest, pools, {"p": "p", "broken": "broken"}, 2)
    times = {}
    for n, c in cases.items():
        for e in c["entries"]:
            if e["key"] in times:  # a reference equal to a pool candidate: measured once
                continue
            t = {}
            for b in (1, 8):
                if e["label"].startswith("rank"):
                    t[str(b)] = 1.0005 if e["rank"] == 2 else 1.0 + e["rank"] / 1000
                else:
                    t[str(b)] = {"ref-chain": 0.99 if b == 1 else 1.5}.get(e["label"], 1.2)
            times[e["key"]] = t
    with open(env["FAKE_TIMES"], "w") as f:
        json.dump(times, f)
    # Schedule: per preset, the chain reference in one unit over both batches, each case's
    # other plans in one unit; two rounds, the second reversed.
    p_units = [u for u in units if u["model"] == "p"]
    assert len(p_units) == 6, [u["name"] for u in p_units]
    shared = [u for u in p_units if "shared" in u["name"]]
    assert len(shared) == 2 and shared[0]["batches"] == [1, 8]
    assert [u["name"] for u in p_units[:3]] == [u["name"] for u in reversed(p_units[3:])]
    _, apart = build_schedule(manifest, pools, {"p": "p", "broken": "broken"}, 1, share=False)
    assert not [u for u in apart if "shared" in u["name"]]
    assert all(len(u["batches"]) == 1 for u in apart) and len(apart) == 8
    g0 = [u for u in p_units if u["name"] == "p_b1_step_g0"]
    assert g0[0]["plans"] == list(reversed(g0[1]["plans"]))
    assert len(g0[0]["plans"]) == 9 + 1  # conv and conv-pdl refs are pool ranks 1 and 2
    measured = os.path.join(tmp, "measured")
    # Stop after the first unit, then resume: every unit runs exactly once.
    r = run("measure", "--megaops", fake, "--pools", pools, "--out", measured, "--rounds", "2",
            "--stop-after", "0.000001", check=False)
    assert r.returncode == 3, r.stderr
    run("measure", "--megaops", fake, "--pools", pools, "--out", measured, "--rounds", "2",
        "--resume")
    st = glob.glob(os.path.join(measured, "status", "*.json"))
    assert len(st) == len(units)
    # The default 2 timed repeats of a step configuration, one in each round.
    with open(os.path.join(measured, "r2", "p_b1_step_g0", g0[0]["plans"][0] + ".json")) as f:
        assert len(json.load(f)["results"][0]["ms_per_token_all"]) == 1
    # Within a process bench runs the conventional plans first; the order given alternates.
    report = os.path.join(tmp, "report.md")
    run("report", "--pools", pools, "--measured", measured, "--out", report, "--json",
        report + ".json")
    with open(report + ".json") as f:
        rep = json.load(f)
    b1, b8 = rep["cases"]["p_b1_step"], rep["cases"]["p_b8_step"]
    assert b1["fastest_label"] == "ref-chain" and not b1["selectors"]["planner"]["hit"]
    assert abs(b1["selectors"]["planner"]["regret"] - (1.0005 / 0.99 - 1)) < 1e-9
    # b8: the pick (conventional + PDL, 1.0005 ms) is the fastest; all-conventional (1.001) is
    # within the tie, so the case counts as won by all-conventional; b1 by the chain: receding.
    assert b8["fastest_label"] == "rank2" and b8["selectors"]["planner"]["hit"]
    assert b8["winner_class"] == "conventional" and b1["winner_class"] == "whole_step"
    assert rep["categories"]["p/step"]["category"] == "receding"
    # The additive selector's pick (rank 9, 1.009 ms) against the chain's 0.99 at b1.
    assert abs(b1["selectors"]["additive"]["regret"] - (1.009 / 0.99 - 1)) < 1e-9
    assert rep["summary"]["planned"] == 4 and rep["summary"]["scored"] == 2
    assert any("broken" in x for x in rep["failures"])
    assert not rep["goals"][0]["met"] and not rep["goals"][1]["met"]
    assert "## Categories" in open(report).read()


def _selftest_legacy(tmp):
    """Rounds 1-5's pools (plans before the megaops-plan format) and measured files still
    report: round 5's figures are reproduced from its folder this way."""
    pools, measured = os.path.join(tmp, "pools"), os.path.join(tmp, "measured")
    os.makedirs(pools)
    os.makedirs(measured)
    pool = [{"rank": 1, "selected_by": ["planner", "baseline"],
             "plan": {"predicted_us": 990.0, "prefill": "graph", "regions": [
                 {"backend": "conventional", "first_op": "embedding"}]}},
            {"rank": 2, "selected_by": ["additive", "no_overlap"],
             "plan": {"predicted_us": 900.0, "prefill": "graph", "regions": [
                 {"backend": "overlap", "first_op": "embedding"},
                 {"backend": "conventional", "first_op": "final_norm"}]}}]
    with open(os.path.join(pools, "m_b1_ttft.json"), "w") as f:
        json.dump(pool, f)
    with open(os.path.join(pools, "manifest.json"), "w") as f:
        json.dump({"git_sha": "old", "cases": [{"case": "m_b1_ttft", "pool": "/x/m_b1_ttft.json",
                                                 "candidates": 2}]}, f)
    for rank, ms in ((1, 1.0), (2, 1.1)):
        with open(os.path.join(measured, f"m_b1_ttft_rank{rank}.json"), "w") as f:
            json.dump({"results": [{"ttft_ms_median": ms, "ms_per_token_median": 9.0}]}, f)
    out = os.path.join(tmp, "r.md")
    subprocess.run([sys.executable, os.path.abspath(__file__), "report", "--pools", pools,
                    "--measured", measured, "--out", out, "--json", out + ".json",
                    "--min-pool", "2"], check=True, capture_output=True)
    with open(out + ".json") as f:
        c = json.load(f)["cases"]["m_b1_ttft"]
    assert c["selectors"]["planner"]["hit"] and c["fastest_us"] == 1000.0
    assert abs(c["selectors"]["additive"]["regret"] - 0.1) < 1e-12
    assert c["winner_class"] == "conventional" and abs(c["lead"] + 1 / 11) < 1e-12


def cmd_selftest(_args):
    _selftest_scoring()
    _selftest_categories()
    with tempfile.TemporaryDirectory() as tmp:
        _selftest_checkpoint(tmp)
    with tempfile.TemporaryDirectory() as tmp:
        _selftest_measure(tmp)
    with tempfile.TemporaryDirectory() as tmp:
        _selftest_legacy(tmp)
    print("validate_planner selftest: ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("checkpoint", help="random-weight checkpoints of custom configs")
    k.add_argument("--megaops", default="build/megaops")
    k.add_argument("--configs", nargs="+", required=True, help="directories with a config.json")
    k.add_argument("--out", required=True, help="one checkpoint per config: OUT/<dir name>")
    k.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("plan")
    p.add_argument("--megaops", default="build/megaops")
    p.add_argument("--profiles", required=True,
                   help="folder with profile_<model>_b<batch>.json from `megaops profile`")
    p.add_argument("--out", required=True)
    p.add_argument("--pool", type=int, default=8)
    p.add_argument("--presets", nargs="*", default=PRESETS)
    p.add_argument("--configs", nargs="*", default=[],
                   help="directories with a custom config.json (bench/planner-unseen/*): "
                        "architectures the planner was not developed on")
    p.add_argument("--batches", nargs="+", type=int, default=BATCHES)
    p.add_argument("--objectives", nargs="+", default=OBJECTIVES)
    m = sub.add_parser("measure")
    m.add_argument("--megaops", default="build/megaops")
    m.add_argument("--pools", required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--checkpoints",
                   help="folder of the custom configs' checkpoints (`checkpoint --out`)")
    m.add_argument("--min-pool", type=int, default=MIN_POOL)
    m.add_argument("--gen", type=int, default=128)
    m.add_argument("--rounds", type=int, default=1,
                   help="passes over each block of units, the second in reverse order (each "
                        "bench process warms up again: 2 rounds cost ~1.6x the time)")
    m.add_argument("--repeats", type=int, default=2,
                   help="timed generations per step configuration, over all rounds (each round "
                        "adds a warm-up)")
    m.add_argument("--ttft-repeats", type=int, default=6,
                   help="timed prefills per TTFT configuration, over all rounds")
    m.add_argument("--case-timeout", type=int, default=300,
                   help="seconds one bench process may run before it is left unmeasured")
    m.add_argument("--resume", action="store_true",
                   help="skip the units a status file says have run (same --out)")
    m.add_argument("--retry-failed", action="store_true",
                   help="with --resume: run the failed units again")
    m.add_argument("--no-shared", action="store_true",
                   help="no process shared by several batches: each case's plans run in its "
                        "own processes, on an executor sized for its batch (~3 more per block)")
    m.add_argument("--check-only", action="store_true",
                   help="with a megaops built without CUDA: check that bench accepts every "
                        "unit's plans (one executor each), time nothing")
    m.add_argument("--stop-after", type=float, default=0,
                   help="start no unit after this many seconds (exit 3; --resume continues)")
    r = sub.add_parser("report")
    r.add_argument("--pools", required=True)
    r.add_argument("--measured", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--json", help="also write the scores as JSON here")
    r.add_argument("--plot")
    r.add_argument("--min-pool", type=int, default=MIN_POOL)
    sub.add_parser("selftest")
    args = ap.parse_args()
    {"checkpoint": cmd_checkpoint, "plan": cmd_plan, "measure": cmd_measure,
     "report": cmd_report, "selftest": cmd_selftest}[args.cmd](args)


if __name__ == "__main__":
    main()
