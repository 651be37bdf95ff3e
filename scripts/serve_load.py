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


def run_json_command(args, command, cmd_args, json_name, problems):
    """`megaops COMMAND ARGS --json OUT/json_name`: the JSON it wrote, or None with why in
    `problems`."""
    path = os.path.join(args.out, json_name)
    try:
        b = subprocess.run([args.megaops, command, *cmd_args, "--json", path], capture_output=True,
                           text=True, timeout=args.bench_timeout)
        sys.stderr.write(b.stdout + b.stderr[-2000:])
        if b.returncode != 0:
            problems.append(f"{command} exited with {b.returncode}: {b.stderr[-500:]}")
            return None
        with open(path) as f:
            return json.load(f)
    except (subprocess.TimeoutExpired, OSError, ValueError) as e:
        problems.append(f"{command}: {type(e).__name__}: {e}")
        return None


def engine_time(before, after, duration):
    """Where the engine's time went over the run, from the server's step histograms: steps, the
    mean model step and loop iteration (ms), the host's time around each model step (iteration -
    model step) and the share of the run the engine loop was busy (the rest it waited for work)."""
    keys = ("megaops_engine_steps_total", "megaops_model_step_seconds_sum",
            "megaops_model_step_seconds_count", "megaops_engine_iteration_seconds_sum",
            "megaops_engine_iteration_seconds_count")
    if before is None or after is None or any(k not in before or k not in after for k in keys):
        return None
    d = {k: after[k] - before[k] for k in keys}
    steps = d["megaops_model_step_seconds_count"]
    iters = d["megaops_engine_iteration_seconds_count"]
    if not steps or not iters:
        return None
    model_ms = 1e3 * d["megaops_model_step_seconds_sum"] / steps
    iter_ms = 1e3 * d["megaops_engine_iteration_seconds_sum"] / iters
    return {"steps": d["megaops_engine_steps_total"], "model_step_ms_mean": model_ms,
            "iteration_ms_mean": iter_ms,
            "host_ms_per_step": 1e3 * (d["megaops_engine_iteration_seconds_sum"]
                                       - d["megaops_model_step_seconds_sum"]) / steps,
            "loop_busy_share": d["megaops_engine_iteration_seconds_sum"] / duration
            if duration else None}


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
    """`megaops serve` on --model, any free port; returns the process once it listens (its URL in
    args.url). A thread keeps reading its stderr into proc.log, so the server never blocks on a
    full pipe and a hung start ends at --startup-timeout."""
    cmd = [args.megaops, "serve", "--model", args.model, "--port", "0", *args.server_args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    proc.log = []
    listening = threading.Event()

    def read():
        for line in proc.stderr:
            proc.log.append(line)
            if not listening.is_set():
                print(line, end="", file=sys.stderr)
            if "listening on http://" in line:
                args.url = line.split("listening on ")[1].strip()
                listening.set()

    proc.reader = threading.Thread(target=read, daemon=True)
    proc.reader.start()
    deadline = time.time() + args.startup_timeout
    while time.time() < deadline and proc.poll() is None and not listening.is_set():
        listening.wait(0.1)
    if listening.is_set():
        return proc
    proc.kill()
    proc.wait()
    proc.reader.join(5)
    sys.exit("serve_load: the server did not start:\n" + "".join(proc.log))


def stop_server(proc, timeout):
    """SIGTERM (unless it exited), its exit status and what it wrote; a string for the status if
    it did not exit within `timeout` (then it is killed)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        status = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        status = f"killed: still running {timeout:.0f} s after SIGTERM"
    proc.reader.join(5)
    return status, "".join(proc.log)


def kv_blocks_at_exit(log):
    """The KV blocks `serve` said were still in use when it stopped (None if it did not say)."""
    for line in reversed(log.splitlines()):
        if line.startswith("serve: stopped;") and "KV blocks in use" in line:
            return int(line.split(";")[1].split()[0])
    return None


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
    metrics_before = scrape_metrics(args.url)
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
    server_log = None
    if args.server_proc is not None:
        exit_status, server_log = stop_server(args.server_proc, args.timeout)
        sys.stderr.write(server_log)
    result = report(args, records, duration, metrics_after)
    result["engine"] = engine_time(metrics_before, metrics_after, duration)
    result["server_exit_status"] = exit_status
    result["kv_blocks_in_use_at_exit"] = None if server_log is None else \
        kv_blocks_at_exit(server_log)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.plot:
        plot(result, args.plot)
    brief = {k: result[k] for k in ("requests", "requests_per_s", "output_tok_per_s", "ttft_s",
                                    "inter_token_s", "metrics_after", "engine",
                                    "server_exit_status")}
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
    if result.get("kv_blocks_in_use_at_exit"):
        problems.append(f"{result['kv_blocks_in_use_at_exit']} KV blocks in use when the server "
                        "stopped")
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


def load_args(common, **kw):
    """A run()'s arguments: the suite's common ones, then this run's."""
    a = argparse.Namespace(**common)
    for k, v in kw.items():
        setattr(a, k, v)
    return a


def suite(args):
    """The GPU serving suite, in one device call (scripts/gpu_run.sh serve), every step under a
    time limit: on --model, one server (--max-batch 64) takes a warm-up, then --streams-a
    concurrent streams of fixed --prompt / --gen (greedy: bench's workload), then --streams-b
    streams of mixed lengths (sampled); `megaops bench --batch STREAMS_A` on the same checkpoint
    with the same prompt and output lengths; then on --fault-model: clients disconnecting
    mid-stream with a burst beyond a small KV cache (queueing, preemption), and a SIGTERM under
    load. Writes serve_suite.json (output tok/s against bench's, TTFT and ITL percentiles, the
    faults' outcomes, every problem) and returns 1 if any check failed."""
    os.makedirs(args.out, exist_ok=True)
    problems = []
    t_suite = time.perf_counter()
    common = dict(megaops=args.megaops, url=None, vocab=None, seed=args.seed,
                  timeout=args.request_timeout, startup_timeout=args.startup_timeout,
                  temperature=0.8, disconnect=0.0, burst=0, burst_after=0.0,
                  sigterm_after=None, sigterm_sent=None, json=None, plot=None,
                  server_proc=None, model=None, server_args=[])
    summary_out = {"model": args.model, "fault_model": args.fault_model,
                   "streams": [args.streams_a, args.streams_b]}

    def brief(r):
        return {k: r[k] for k in ("requests", "requests_per_s", "output_tok_per_s", "ttft_s",
                                  "inter_token_s", "metrics_after", "server_exit_status",
                                  "kv_blocks_in_use_at_exit", "duration_s", "engine")}

    # 1. Throughput on one server: both stream counts, and a warm-up (each bucket's graph is
    # captured on its first step, cuBLASLt picks its algorithms per shape).
    vocab = json.load(open(os.path.join(args.model, "config.json")))["vocab_size"]
    max_context = max(args.prompt + args.gen, args.mixed_prompt[1] + args.mixed_output[1]) + 16
    server = load_args(common, model=args.model, vocab=vocab,
                       server_args=["--max-batch", str(max(args.streams_a, args.streams_b)),
                                    "--max-context", str(max_context), *args.server_args])
    t0 = time.perf_counter()
    proc = start_server(server)
    summary_out["server_start_s"] = time.perf_counter() - t0
    server.server_proc = None  # run() leaves a server it did not start running
    runs = {}
    try:
        # Each run draws its prompts from a seed of its own: the same seed would start their
        # first prompts alike, and the prefix cache would skip part of a prompt bench computes.
        warm = load_args(common, url=server.url, vocab=vocab, seed=args.seed + 1,
                         requests=2 * args.streams_b,
                         concurrency=args.streams_b, prompt_range=[16, 512],
                         output_range=[8, 32])
        run(warm)
        fixed = load_args(common, url=server.url, vocab=vocab, temperature=0.0,
                          requests=args.waves * args.streams_a, concurrency=args.streams_a,
                          prompt_range=[args.prompt, args.prompt],
                          output_range=[args.gen, args.gen],
                          json=os.path.join(args.out, f"load_{args.streams_a}.json"),
                          plot=os.path.join(args.out, f"load_{args.streams_a}.png"))
        runs["a"] = run(fixed)
        problems += [f"{args.streams_a} streams: {p}" for p in check(runs["a"], sigterm=False)]
        mixed = load_args(common, url=server.url, vocab=vocab, seed=args.seed + 2,
                          requests=args.requests_b,
                          concurrency=args.streams_b, prompt_range=args.mixed_prompt,
                          output_range=args.mixed_output,
                          json=os.path.join(args.out, f"load_{args.streams_b}.json"),
                          plot=os.path.join(args.out, f"load_{args.streams_b}.png"))
        runs["b"] = run(mixed)
        problems += [f"{args.streams_b} streams: {p}" for p in check(runs["b"], sigterm=False)]
    finally:
        status, log = stop_server(proc, args.request_timeout)
        with open(os.path.join(args.out, "serve_throughput.log"), "w") as f:
            f.write(log)
    left = kv_blocks_at_exit(log)
    summary_out["throughput_server"] = {"exit_status": status, "kv_blocks_in_use_at_exit": left}
    if status != 0:
        problems.append(f"throughput server exited with {status}")
    if left:
        problems.append(f"throughput server: {left} KV blocks in use at exit")
    summary_out[f"load_{args.streams_a}"] = brief(runs["a"])
    summary_out[f"load_{args.streams_b}"] = brief(runs["b"])

    # 2. The same workload through `megaops bench` (one executor, batch STREAMS_A, no server), and
    # on the engine without the HTTP front end (`megaops bench-serve`, the runner serve uses):
    # served / engine is what the front end costs, engine / bench the paged runner's step.
    if args.bench:
        lengths = ["--model", args.model, "--batch", str(args.streams_a), "--prompt",
                   str(args.prompt), "--gen", str(args.gen), "--repeats", "3"]
        served = runs["a"]["output_tok_per_s"] or 0.0
        doc = run_json_command(args, "bench", lengths, f"bench_b{args.streams_a}.json", problems)
        rows = (doc or {}).get("results") or []
        if doc is not None and not rows:
            problems.append("bench: its JSON has no results")
        if rows:
            row = rows[0]
            decode = row["tokens_per_s"]
            # Bench's end to end: the batch's prompt pass, then gen - 1 decode steps.
            e2e = args.streams_a * args.gen / (
                (row["ttft_ms_median"] + (args.gen - 1) * row["ms_per_token_median"]) / 1e3)
            summary_out["bench"] = {"decode_tok_per_s": decode, "end_to_end_tok_per_s": e2e,
                                    "ms_per_token_median": row["ms_per_token_median"],
                                    "ttft_ms_median": row["ttft_ms_median"]}
            summary_out["served_over_bench_decode"] = served / decode
            summary_out["served_over_bench_end_to_end"] = served / e2e
            # Reported, not a failure of the suite: the target of issue 48 item 5.
            summary_out["within_10_percent_of_bench"] = served >= 0.9 * decode
        e = run_json_command(args, "bench-serve", lengths,
                             f"bench_serve_b{args.streams_a}.json", problems)
        if e is not None:
            summary_out["engine"] = {k: e[k] for k in ("median_output_tok_per_s",
                                                       "median_model_step_ms",
                                                       "median_host_ms_per_step")}
            summary_out["served_over_engine"] = served / e["median_output_tok_per_s"]
            if "bench" in summary_out:
                summary_out["engine_over_bench_end_to_end"] = (
                    e["median_output_tok_per_s"] / summary_out["bench"]["end_to_end_tok_per_s"])

    # 3. Faults on a small KV cache: disconnects and a burst beyond its capacity (half the mixed
    # run's lengths).
    fvocab = json.load(open(os.path.join(args.fault_model, "config.json")))["vocab_size"]
    fprompt = [args.mixed_prompt[0], max(args.mixed_prompt[0], args.mixed_prompt[1] // 2)]
    foutput = [args.mixed_output[0], max(args.mixed_output[0], args.mixed_output[1] // 2)]
    fcontext = str(fprompt[1] + foutput[1] + 16)
    faults = load_args(common, model=args.fault_model, vocab=fvocab, requests=args.fault_requests,
                       concurrency=32, prompt_range=fprompt, output_range=foutput,
                       disconnect=0.2, burst=48, burst_after=1.0,
                       json=os.path.join(args.out, "load_faults.json"),
                       server_args=["--max-batch", "16", "--max-context", fcontext, "--kv-blocks",
                                    str(args.fault_kv_blocks), "--max-step-tokens", "512",
                                    *args.server_args])
    rf = run(faults)
    summary_out["faults"] = brief(rf)
    problems += ["faults: " + p for p in check(rf, sigterm=False)]
    if rf["requests"]["disconnected"] == 0:
        problems.append("faults: no client disconnected")
    expect = args.fault_requests + 48 - rf["requests"]["disconnected"]
    if rf["requests"]["completed"] < expect:
        problems.append(f"faults: {rf['requests']['completed']} of {expect} requests completed")

    # 4. SIGTERM under load: drains, refuses the rest with 503, exits 0, holds no block.
    term = load_args(common, model=args.fault_model, vocab=fvocab, requests=args.fault_requests,
                     concurrency=32, prompt_range=fprompt, output_range=foutput,
                     sigterm_after=args.sigterm_after,
                     json=os.path.join(args.out, "load_sigterm.json"),
                     server_args=["--max-batch", "16", "--max-context", fcontext,
                                  "--drain-seconds", "30", *args.server_args])
    rt = run(term)
    summary_out["sigterm"] = brief(rt)
    problems += ["sigterm: " + p for p in check(rt, sigterm=True)]
    if rt["server_exit_status"] != 0:
        problems.append(f"sigterm: exit status {rt['server_exit_status']}")
    if rt["kv_blocks_in_use_at_exit"] is None:
        problems.append("sigterm: the server did not say how many KV blocks it held at exit")

    summary_out["suite_s"] = time.perf_counter() - t_suite
    summary_out["problems"] = problems
    with open(os.path.join(args.out, "serve_suite.json"), "w") as f:
        json.dump(summary_out, f, indent=1)
    print(json.dumps({k: v for k, v in summary_out.items()
                      if k in ("bench", "served_over_bench_decode", "served_over_bench_end_to_end",
                               "engine", "served_over_engine", "engine_over_bench_end_to_end",
                               "within_10_percent_of_bench", "suite_s", "problems")}, indent=1))
    for k in (f"load_{args.streams_a}", f"load_{args.streams_b}"):
        r = summary_out[k]
        print(f"{k}: {r['output_tok_per_s']:.0f} output tok/s, TTFT p50/p99 "
              f"{fmt_ms(r['ttft_s']['p50'])}/{fmt_ms(r['ttft_s']['p99'])} ms, ITL p50/p99 "
              f"{fmt_ms(r['inter_token_s']['p50'])}/{fmt_ms(r['inter_token_s']['p99'])} ms")
        e = r.get("engine")
        if e:
            print(f"  engine: {e['steps']:.0f} steps, model step {e['model_step_ms_mean']:.3f} ms, "
                  f"loop iteration {e['iteration_ms_mean']:.3f} ms, host "
                  f"{e['host_ms_per_step']:.3f} ms a step, loop busy "
                  f"{100 * e['loop_busy_share']:.0f}% of the run")
    if "bench" in summary_out:
        b = summary_out["bench"]
        print(f"bench b{args.streams_a}: {b['decode_tok_per_s']:.0f} decode tok/s "
              f"({b['end_to_end_tok_per_s']:.0f} with its prompt pass); served / bench: "
              f"{summary_out['served_over_bench_decode']:.3f} (decode), "
              f"{summary_out['served_over_bench_end_to_end']:.3f} (end to end)")
    if "engine" in summary_out:
        e = summary_out["engine"]
        print(f"bench-serve b{args.streams_a}: {e['median_output_tok_per_s']:.0f} output tok/s, "
              f"model step {e['median_model_step_ms']:.3f} ms, host "
              f"{e['median_host_ms_per_step']:.3f} ms a step; served / engine: "
              f"{summary_out['served_over_engine']:.3f}"
              + (f", engine / bench (end to end): {summary_out['engine_over_bench_end_to_end']:.3f}"
                 if "engine_over_bench_end_to_end" in summary_out else ""))
    for k in ("faults", "sigterm"):
        r = summary_out[k]["requests"]
        m = summary_out[k]["metrics_after"] or {}
        print(f"{k}: {r['completed']} of {r['sent']} completed, {r['disconnected']} disconnected, "
              f"refused {r['refused_by_status']}, {r['refused_connection_after_sigterm']} refused "
              f"connections after SIGTERM, {r['failed_mid_stream']} failed, {r['unanswered']} "
              f"unanswered; KV blocks left: {m.get('megaops_kv_blocks_used')} (metrics), "
              f"{summary_out[k]['kv_blocks_in_use_at_exit']} (at exit)")
    for p in problems:
        print("serve_load suite: " + p, file=sys.stderr)
    print(f"serve_load suite: {'FAILED' if problems else 'ok'} in {summary_out['suite_s']:.0f} s")
    return 1 if problems else 0


def fmt_ms(v):
    return "-" if v is None else f"{v * 1e3:.1f}"


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "suite":
        p = argparse.ArgumentParser(description=suite.__doc__.split("\n\n")[0])
        p.add_argument("suite")
        p.add_argument("--megaops", required=True)
        p.add_argument("--model", required=True, help="checkpoint for throughput and bench")
        p.add_argument("--fault-model", help="checkpoint for the fault cases (default --model)")
        p.add_argument("--out", required=True)
        p.add_argument("--streams-a", type=int, default=32)
        p.add_argument("--streams-b", type=int, default=64)
        p.add_argument("--prompt", type=int, default=128)
        p.add_argument("--gen", type=int, default=256)
        p.add_argument("--waves", type=int, default=3,
                       help="requests of the fixed run: waves x streams-a")
        p.add_argument("--requests-b", type=int, default=300)
        p.add_argument("--mixed-prompt", type=int, nargs=2, default=[16, 1024],
                       help="the mixed run's prompt lengths (log-uniform); the faults take half")
        p.add_argument("--mixed-output", type=int, nargs=2, default=[16, 512],
                       help="the mixed run's max_tokens (uniform); the faults take half")
        p.add_argument("--fault-requests", type=int, default=96)
        p.add_argument("--fault-kv-blocks", type=int, default=192,
                       help="the fault server's KV blocks (of 16): a few requests' worth")
        p.add_argument("--sigterm-after", type=float, default=2.0)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--no-bench", dest="bench", action="store_false")
        p.add_argument("--request-timeout", type=float, default=120)
        p.add_argument("--startup-timeout", type=float, default=180)
        p.add_argument("--bench-timeout", type=float, default=180)
        p.add_argument("--server-args", nargs=argparse.REMAINDER, default=[],
                       help="the rest goes to every `megaops serve` (e.g. --cpu)")
        a = p.parse_args()
        a.fault_model = a.fault_model or a.model
        return suite(a)
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
