#!/usr/bin/env python3
"""A bounded load test of `megaops serve`: `--requests` streamed completions of mixed prompt and
output lengths from a seeded generator, `--concurrency` at a time, some clients disconnecting
mid-stream (`--disconnect`), an optional burst beyond the KV capacity (`--burst`) and an optional
SIGTERM under load (`--sigterm`, with a server this script started). Reports requests/s, output
tok/s, p50/p99 TTFT and inter-token latency, what was refused (by status) and what failed, and
the server's KV blocks in use at the end (must be 0), as JSON, and as a plot when matplotlib is
installed.

  # against a running server (token-id prompts: --vocab bounds the ids)
  scripts/serve_load.py --url http://127.0.0.1:8000 --vocab 128256 --json load.json
  # start one (GPU if present), 64 streams, a few hundred requests, a plot
  scripts/serve_load.py --megaops build/megaops --model ckpt/ --concurrency 64 --requests 300 \\
      --json load.json --plot load.png
  # what CI runs on the CPU oracle (a tiny checkpoint, faults included, asserts the outcome)
  scripts/serve_load.py selftest --megaops build/megaops

Every request is a streamed /v1/completions with token-id prompts and ignore_eos, so prompt and
output lengths are exact; TTFT is the time to the first chunk with text or a token, inter-token
latency the gaps between later chunks (one token each on megaops).
"""
import argparse
import http.client
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor


def percentile(values, q):
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * (len(s) - 1)))))]


def summary(values):
    return {"n": len(values), "mean": statistics.fmean(values) if values else None,
            "p50": percentile(values, 50), "p90": percentile(values, 90),
            "p99": percentile(values, 99), "max": max(values) if values else None}


def workload(args):
    """The seeded requests: prompt ids, max_tokens, and whether the client disconnects."""
    rng = random.Random(args.seed)
    out = []
    for i in range(args.requests):
        plen = int(round(2 ** rng.uniform(*[v.bit_length() - 1 for v in args.prompt_range])))
        plen = max(args.prompt_range[0], min(args.prompt_range[1], plen))
        olen = rng.randint(*args.output_range)
        out.append({"i": i, "prompt": [rng.randrange(3, args.vocab) for _ in range(plen)],
                    "max_tokens": olen, "disconnect": rng.random() < args.disconnect})
    return out


def one(args, req, t_start, records, lock):
    """One streamed request on a connection of its own (the Python standard library only, so the
    script runs on a bare GPU machine)."""
    rec = {"i": req["i"], "prompt_tokens": len(req["prompt"]), "max_tokens": req["max_tokens"],
           "start_s": time.perf_counter() - t_start, "status": None, "chunks": [],
           "disconnected": False, "error": None, "completion_tokens": 0,
           "refused_connection": False}
    body = {"prompt": req["prompt"], "max_tokens": req["max_tokens"], "stream": True,
            "temperature": args.temperature, "seed": req["i"], "ignore_eos": True,
            "stream_options": {"include_usage": True}}
    url = urllib.parse.urlsplit(args.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=args.timeout)
    t0 = time.perf_counter()
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        rec["status"] = r.status
        if r.status != 200:
            rec["error"] = r.read().decode(errors="replace")[:300]
        else:
            while True:
                line = r.readline()
                if not line:
                    break
                line = line.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    rec["error"] = chunk["error"].get("message")
                    break
                if chunk.get("usage"):
                    rec["completion_tokens"] = chunk["usage"]["completion_tokens"]
                if chunk.get("choices"):
                    rec["chunks"].append(time.perf_counter() - t0)
                    if req["disconnect"] and len(rec["chunks"]) >= 3:
                        rec["disconnected"] = True
                        break  # closing the connection below: a client gone mid-stream
    except ConnectionRefusedError as e:
        # After a SIGTERM the server stops listening once it has drained: a connection refused
        # then is the answer a client gets from a server that is gone, not a lost request.
        rec["error"] = f"{type(e).__name__}: {e}"
        rec["refused_connection"] = args.sigterm_sent is not None
    except (OSError, http.client.HTTPException, ValueError) as e:
        rec["error"] = f"{type(e).__name__}: {e}"
    finally:
        conn.close()
    rec["end_s"] = time.perf_counter() - t_start
    with lock:
        records.append(rec)


def run_load(args, reqs):
    records, lock = [], threading.Lock()
    t_start = time.perf_counter()
    extra = []
    with ThreadPoolExecutor(max_workers=args.concurrency) as pool, \
            ThreadPoolExecutor(max_workers=max(1, args.burst)) as burst_pool:
        futures = [pool.submit(one, args, r, t_start, records, lock) for r in reqs]
        if args.burst:
            # A burst beyond the KV capacity on top of the steady load: these must queue (or be
            # refused with a status), never fail.
            time.sleep(args.burst_after)
            extra = [burst_pool.submit(one, args, {"i": 100000 + j,
                                                   "prompt": reqs[j % len(reqs)]["prompt"],
                                                   "max_tokens": args.output_range[1],
                                                   "disconnect": False},
                                       t_start, records, lock) for j in range(args.burst)]
        if args.sigterm_after is not None:
            time.sleep(args.sigterm_after)
            args.sigterm_sent = time.perf_counter() - t_start
            args.server_proc.send_signal(signal.SIGTERM)
        for f in futures + extra:
            f.result()
    return records, time.perf_counter() - t_start


def scrape_metrics(url):
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
            text = r.read().decode()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, value = line.rsplit(" ", 1)
        out[name.split("{")[0] + ("" if "le=" not in name else name[name.index("le="):])] = \
            float(value)
    return out


def report(args, records, duration, metrics_after):
    ok = [r for r in records if r["status"] == 200 and not r["error"] and not r["disconnected"]]
    ttft = [r["chunks"][0] for r in ok if r["chunks"]]
    itl = [b - a for r in ok for a, b in zip(r["chunks"], r["chunks"][1:])]
    out_tokens = sum(r["completion_tokens"] for r in ok)
    refused = {}
    for r in records:
        if r["status"] not in (None, 200):
            refused[str(r["status"])] = refused.get(str(r["status"]), 0) + 1
    failed = [r for r in records if r["error"] and r["status"] == 200 and not r["disconnected"]]
    unanswered = [r for r in records if r["status"] is None and not r["refused_connection"]]
    return {
        "config": {k: v for k, v in vars(args).items() if k not in ("server_proc", "func")},
        "sigterm_sent_s": args.sigterm_sent,
        "duration_s": duration,
        "requests": {"sent": len(records), "completed": len(ok),
                     "disconnected": sum(r["disconnected"] for r in records),
                     "refused_by_status": refused,
                     "refused_connection_after_sigterm": sum(r["refused_connection"]
                                                             for r in records),
                     "failed_mid_stream": len(failed),
                     "unanswered": len(unanswered),
                     "failures": [r["error"] for r in failed + unanswered][:10]},
        "requests_per_s": len(ok) / duration if duration else None,
        "output_tokens": out_tokens,
        "output_tok_per_s": out_tokens / duration if duration else None,
        "ttft_s": summary(ttft),
        "inter_token_s": summary(itl),
        "metrics_after": None if metrics_after is None else {
            k: metrics_after.get(k) for k in ("megaops_kv_blocks_used", "megaops_num_requests_running",
                                              "megaops_num_requests_waiting",
                                              "megaops_num_preemptions_total")},
        "records": [{k: r[k] for k in ("i", "prompt_tokens", "max_tokens", "status", "start_s",
                                       "end_s", "completion_tokens", "disconnected")}
                    | {"ttft_s": r["chunks"][0] if r["chunks"] else None} for r in records],
    }


def plot(result, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("serve_load: matplotlib not installed, no plot", file=sys.stderr)
        return
    recs = [r for r in result["records"] if r["ttft_s"] is not None]
    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    ax[0].hist([r["ttft_s"] * 1e3 for r in recs], bins=40)
    ax[0].set(title="time to first token", xlabel="ms", ylabel="requests")
    ax[1].scatter([r["prompt_tokens"] for r in recs], [r["ttft_s"] * 1e3 for r in recs], s=6)
    ax[1].set(title="TTFT by prompt length", xlabel="prompt tokens", ylabel="ms")
    ends = sorted(r["end_s"] for r in result["records"] if r["status"] == 200)
    ax[2].plot(ends, range(1, len(ends) + 1))
    ax[2].set(title=f"{result['output_tok_per_s']:.0f} output tok/s, "
                    f"{result['requests_per_s']:.2f} req/s", xlabel="s", ylabel="requests done")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def start_server(args):
    cmd = [args.megaops, "serve", "--model", args.model, "--port", "0", *args.server_args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + args.startup_timeout
    log = []
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        log.append(line)
        print(line, end="", file=sys.stderr)
        if "listening on http://" in line:
            args.url = line.split("listening on ")[1].strip()
            return proc
    proc.kill()
    sys.exit("serve_load: the server did not start:\n" + "".join(log))


def run(args):
    args.sigterm_sent = None
    if args.model:
        if args.vocab is None:
            args.vocab = json.load(open(os.path.join(args.model, "config.json")))["vocab_size"]
        args.server_proc = start_server(args)
    elif not args.url:
        sys.exit("serve_load: give --url or --model")
    else:
        args.server_proc = None
        if args.sigterm_after is not None:
            sys.exit("serve_load: --sigterm needs a server this script starts (--model)")
    if args.vocab is None:
        sys.exit("serve_load: give --vocab (the model's vocabulary size) with --url")
    records, duration = run_load(args, workload(args))
    metrics_after = None
    exit_status = None
    if args.sigterm_after is None:
        deadline = time.time() + 30  # aborted requests free their blocks within a step
        while True:
            metrics_after = scrape_metrics(args.url)
            if metrics_after is None or metrics_after.get("megaops_kv_blocks_used", 0) == 0 \
                    or time.time() > deadline:
                break
            time.sleep(0.1)
    if args.server_proc is not None:
        if args.server_proc.poll() is None:
            args.server_proc.send_signal(signal.SIGTERM)
        exit_status = args.server_proc.wait(timeout=args.timeout)
        sys.stderr.write(args.server_proc.stderr.read())
    result = report(args, records, duration, metrics_after)
    result["server_exit_status"] = exit_status
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.plot:
        plot(result, args.plot)
    brief = {k: result[k] for k in ("requests", "requests_per_s", "output_tok_per_s", "ttft_s",
                                    "inter_token_s", "metrics_after", "server_exit_status")}
    print(json.dumps(brief, indent=1))
    return result


def check(result, sigterm):
    """What must hold after any load: nothing crashed that should have completed, every refusal
    answered with a status, no KV block leaked, a clean exit."""
    req = result["requests"]
    problems = []
    if req["failed_mid_stream"] and not sigterm:
        problems.append(f"{req['failed_mid_stream']} requests failed mid-stream: {req['failures']}")
    if req["unanswered"]:
        problems.append(f"{req['unanswered']} requests got no status: {req['failures']}")
    bad_status = {s: n for s, n in req["refused_by_status"].items()
                  if not (s == "503" and sigterm) and s != "429"}
    if bad_status:
        problems.append(f"refused with {bad_status}")
    m = result["metrics_after"]
    if m is not None and m["megaops_kv_blocks_used"] != 0:
        problems.append(f"{m['megaops_kv_blocks_used']} KV blocks still in use")
    if result["server_exit_status"] not in (None, 0):
        problems.append(f"the server exited with {result['server_exit_status']}")
    return problems


def selftest(args):
    """The load test on the CPU oracle with a tiny checkpoint: disconnects and a burst beyond the
    KV capacity (every request completes, none leaks a block), then a SIGTERM under load (exit 0,
    later requests refused with 503)."""
    tmp = tempfile.mkdtemp(prefix="serve_load_")
    ckpt = os.path.join(tmp, "tiny")
    subprocess.run([args.megaops, "init-random", "--preset", "tiny-llama3", "--out", ckpt],
                   check=True, capture_output=True)
    common = dict(megaops=args.megaops, model=ckpt, url=None, vocab=None, seed=1, timeout=300,
                  temperature=0.8,
                  startup_timeout=60, json=None, plot=None, prompt_range=[8, 128],
                  output_range=[8, 64])
    load = argparse.Namespace(**common, requests=48, concurrency=12, disconnect=0.2, burst=24,
                              burst_after=0.2, sigterm_after=None,
                              server_args=["--cpu", "--max-batch", "8", "--max-context", "256",
                                           "--kv-blocks", "40", "--max-step-tokens", "64"])
    result = run(load)
    problems = check(result, sigterm=False)
    if result["requests"]["disconnected"] == 0:
        problems.append("no client disconnected")
    if result["requests"]["completed"] < 48 + 24 - result["requests"]["disconnected"]:
        problems.append(f"only {result['requests']['completed']} requests completed")
    term = argparse.Namespace(**common, requests=40, concurrency=8, disconnect=0.0, burst=0,
                              burst_after=0, sigterm_after=0.5,
                              server_args=["--cpu", "--max-batch", "4", "--max-context", "256",
                                           "--drain-seconds", "60"])
    result = run(term)
    problems += ["sigterm: " + p for p in check(result, sigterm=True)]
    if result["server_exit_status"] != 0:
        problems.append(f"sigterm: exit status {result['server_exit_status']}")
    for p in problems:
        print("serve_load selftest: " + p, file=sys.stderr)
    print("serve_load selftest: " + ("FAILED" if problems else "ok"))
    return 1 if problems else 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "selftest":
        p = argparse.ArgumentParser(description="serve_load.py selftest")
        p.add_argument("selftest")
        p.add_argument("--megaops", default=os.path.join(os.path.dirname(__file__), "..",
                                                         "build", "megaops"))
        return selftest(p.parse_args())
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--url", help="a running server's base URL")
    p.add_argument("--megaops", help="the megaops binary to start a server with (with --model)")
    p.add_argument("--model", help="checkpoint directory: start `megaops serve` on it")
    p.add_argument("--server-args", nargs=argparse.REMAINDER, default=[],
                   help="the rest of the command line goes to `megaops serve`")
    p.add_argument("--vocab", type=int, help="prompt ids are drawn below this (default: config)")
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--prompt-range", type=int, nargs=2, default=[16, 1024], metavar=("MIN", "MAX"),
                   help="prompt tokens, log-uniform (default 16 1024)")
    p.add_argument("--output-range", type=int, nargs=2, default=[16, 512], metavar=("MIN", "MAX"),
                   help="max_tokens, uniform (default 16 512)")
    p.add_argument("--disconnect", type=float, default=0.0,
                   help="fraction of clients that disconnect after 3 chunks")
    p.add_argument("--burst", type=int, default=0,
                   help="extra requests sent at once after --burst-after seconds")
    p.add_argument("--burst-after", type=float, default=2.0)
    p.add_argument("--sigterm", dest="sigterm_after", type=float, default=None, metavar="SECONDS",
                   help="SIGTERM the server this many seconds into the load")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--temperature", type=float, default=0.8,
                   help="every request's temperature (0: greedy), seeded by its index")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--startup-timeout", type=float, default=600)
    p.add_argument("--json", help="write the full result here")
    p.add_argument("--plot", help="write a PNG here (needs matplotlib)")
    args = p.parse_args()
    if args.model and not args.megaops:
        args.megaops = os.path.join(os.path.dirname(__file__), "..", "build", "megaops")
    result = run(args)
    problems = check(result, sigterm=args.sigterm_after is not None)
    for pr in problems:
        print("serve_load: " + pr, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
