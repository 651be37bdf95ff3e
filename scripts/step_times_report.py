#!/usr/bin/env python3
"""How decode steps grow with the context, from `megaops bench --step-times` JSON.

For every row (batch, PDL, executor) of each file: the mean step of every timed repeat (a repeat
far from the others is a state change: docs/perf-notes.md, "The prompt through the captured decode
step"), then the step time by context length (the mean over repeats of each step, in blocks of
--block steps), its growth from the first block to the last, and the largest jump between
neighbouring steps (a kernel changing shape at a context length: one more round of loads, a split;
docs/perf-notes.md, "Decode attention's cost grows with the context"). Step i of a repeat attends
over prompt + 1 + i keys.

  python3 scripts/step_times_report.py bench.json [more.json ...] [--block 16] [--json out.json]
  python3 scripts/step_times_report.py selftest
"""
import argparse
import json
import statistics
import sys


def row_report(row, prompt, block):
    """The figures of one bench row that carries step_ms (a list of repeats of step times)."""
    repeats = row["step_ms"]
    if not repeats or any(len(r) != len(repeats[0]) for r in repeats):
        raise ValueError("step_ms: expected repeats of equal length")
    n = len(repeats[0])
    if n == 0:
        raise ValueError("step_ms: empty repeats")
    per_step = [statistics.mean(r[i] for r in repeats) for i in range(n)]
    blocks = []
    for b0 in range(0, n, block):
        chunk = per_step[b0:b0 + block]
        blocks.append({"ctx_first": prompt + 1 + b0, "ctx_last": prompt + b0 + len(chunk),
                       "ms": statistics.mean(chunk)})
    # The largest jump: the step-to-step difference of the per-step means, smoothed over 4 steps
    # on each side so that one noisy step does not count.
    jump, jump_at = 0.0, None
    w = 4
    for i in range(w, n - w + 1):
        d = statistics.mean(per_step[i:i + w]) - statistics.mean(per_step[i - w:i])
        if d > jump:
            jump, jump_at = d, prompt + 1 + i
    return {
        "batch": row.get("batch"),
        "pdl": row.get("pdl"),
        "executor": row.get("executor", "conventional"),
        "repeat_ms": [statistics.mean(r) for r in repeats],
        "blocks": blocks,
        "growth_ms": blocks[-1]["ms"] - blocks[0]["ms"],
        "largest_jump_ms": jump,
        "largest_jump_at_ctx": jump_at,
    }


def report(doc, block):
    prompt = doc.get("prompt_tokens")
    if not isinstance(prompt, int):
        raise ValueError("prompt_tokens: expected an integer")
    rows = [row_report(r, prompt, block) for r in doc.get("results", []) if "step_ms" in r]
    if not rows:
        raise ValueError("no row with step_ms (run bench with --step-times)")
    return {"model": doc.get("model"), "git_sha": doc.get("git_sha"), "gpu": doc.get("gpu"),
            "prompt_tokens": prompt, "rows": rows}


def print_report(path, r):
    print(f"{path}: {r['model']} ({r['git_sha']}, {r['gpu']}), prompt {r['prompt_tokens']}")
    for x in r["rows"]:
        pdl = "on" if x["pdl"] else "off"
        print(f"  {x['executor']} batch {x['batch']} PDL {pdl}: repeats "
              + " ".join(f"{v:.3f}" for v in x["repeat_ms"]) + " ms")
        print("    by context: " + "  ".join(
            f"{b['ctx_first']}-{b['ctx_last']} {b['ms']:.3f}" for b in x["blocks"]))
        at = x["largest_jump_at_ctx"]
        where = f" at {at} keys" if at is not None else ""
        print(f"    growth {x['growth_ms'] * 1e3:+.1f} us, largest jump "
              f"{x['largest_jump_ms'] * 1e3:+.1f} us{where}")


def selftest():
    """A step time that is flat, then steps up by 0.1 ms at 129 keys, in two repeats 0.2 apart."""
    prompt, n = 32, 127
    base = [1.0 if prompt + 1 + i < 129 else 1.1 for i in range(n)]
    doc = {"model": "m", "git_sha": "s", "gpu": "g", "prompt_tokens": prompt,
           "results": [{"batch": 1, "pdl": False, "executor": "conventional",
                        "step_ms": [base, [v + 0.2 for v in base]]},
                       {"batch": 8, "pdl": True}]}
    r = report(doc, 16)
    assert len(r["rows"]) == 1, r
    x = r["rows"][0]
    assert [round(v, 6) for v in x["repeat_ms"]] == [round(statistics.mean(base), 6),
                                                     round(statistics.mean(base) + 0.2, 6)], x
    assert x["largest_jump_at_ctx"] == 129 and abs(x["largest_jump_ms"] - 0.1) < 1e-9, x
    assert abs(x["growth_ms"] - 0.1) < 1e-9, x
    assert x["blocks"][0]["ctx_first"] == 33 and x["blocks"][-1]["ctx_last"] == 159, x
    for bad in ({"prompt_tokens": 32, "results": [{"batch": 1}]},
                {"results": [{"step_ms": [[1.0]]}]},
                {"prompt_tokens": 32, "results": [{"step_ms": [[1.0, 2.0], [1.0]]}]}):
        try:
            report(bad, 16)
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad}")
    print("step_times_report.py selftest: ok")


def main():
    if sys.argv[1:] == ["selftest"]:
        selftest()
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench_json", nargs="+")
    ap.add_argument("--block", type=int, default=16, help="steps per context block (default 16)")
    ap.add_argument("--json", help="also write the figures here")
    a = ap.parse_args()
    if a.block < 1:
        sys.exit("step_times_report.py: --block: expected >= 1, found " + str(a.block))
    out = {}
    for path in a.bench_json:
        try:
            with open(path) as f:
                r = report(json.load(f), a.block)
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.exit(f"step_times_report.py: {path}: {e}")
        print_report(path, r)
        out[path] = r
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
