"""`megaops serve` driven by the official openai client on the CPU oracle: completions and chat,
streamed and not, give the engine's tokens (the CLI's for the same prompt); 16 concurrent streams
each get what they get alone; a stream closed mid-way frees its KV blocks; n, stop, max_tokens,
temperature and seed behave as OpenAI's API says; bad requests get a 4xx with a JSON error naming
the field, interleaved with good ones that still succeed; SIGTERM drains and exits 0."""
import json
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import CLI, Server

openai = pytest.importorskip("openai")

PROMPTS = ["Hello", "Once upon a time", "The model writes", "A", "Tell me a story about a cat",
           "1, 2, 3,", "Why is the sky blue?", "Lorem ipsum dolor sit amet"]


def post(url, body, raw=False):
    """(status, parsed JSON body) of a POST, errors included."""
    data = body if raw else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    except urllib.error.URLError as e:  # the server is gone
        return None, {"error": {"message": str(e)}}


def metrics(server):
    with urllib.request.urlopen(server.url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r'^(\w+)\{([^}]*)\} (\S+)$', line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            key = m.group(1) + "".join(f"[{k}={v}]" for k, v in sorted(labels.items())
                                       if k != "model_name")
            out[key] = float(m.group(3))
    return out


def wait_idle(server, timeout=20):
    """Polls /metrics until no request runs or waits and no KV block is in use."""
    deadline = time.time() + timeout
    while True:
        m = metrics(server)
        if (m["megaops_num_requests_running"] == 0 and m["megaops_num_requests_waiting"] == 0
                and m["megaops_kv_blocks_used"] == 0):
            return m
        assert time.time() < deadline, m
        time.sleep(0.05)


def greedy(client, prompt, max_tokens=12, **kw):
    return client.completions.create(model="tiny", prompt=prompt, max_tokens=max_tokens,
                                     temperature=0, extra_body={"ignore_eos": True}, **kw)


def test_models_and_health(server, client):
    assert [m.id for m in client.models.list().data] == ["tiny"]
    with urllib.request.urlopen(server.url + "/health", timeout=30) as r:
        assert r.status == 200


def test_a_port_in_use_is_an_error(ckpt, server):
    port = server.url.rsplit(":", 1)[1]
    out = subprocess.run([CLI, "serve", "--model", ckpt, "--cpu", "--port", port],
                         capture_output=True, timeout=60)
    assert out.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in out.stderr.decode()


def test_completion_is_the_cli_generation(ckpt, client):
    out = greedy(client, "The model writes", max_tokens=16)
    cli = subprocess.run([CLI, "generate", "--model", ckpt, "--cpu", "--prompt",
                          "The model writes", "--max-new-tokens", "16", "--ignore-eos"],
                         capture_output=True, check=True).stdout.decode()
    assert out.choices[0].text + "\n" == cli
    assert out.choices[0].finish_reason == "length"
    ids = subprocess.run([CLI, "tokenize", "--model", ckpt, "--text", "The model writes"],
                         capture_output=True, check=True).stdout.decode().strip().split(",")
    assert out.usage.prompt_tokens == len(ids)
    assert out.usage.completion_tokens == 16
    assert out.usage.total_tokens == len(ids) + 16


def test_streaming_gives_the_same_text(client):
    for kw in [dict(temperature=0), dict(temperature=0.9, seed=5)]:
        whole = client.completions.create(model="tiny", prompt="Hello", max_tokens=20,
                                          extra_body={"ignore_eos": True}, **kw)
        chunks = list(client.completions.create(model="tiny", prompt="Hello", max_tokens=20,
                                                stream=True, extra_body={"ignore_eos": True},
                                                **kw))
        assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
        assert chunks[-1].choices[0].finish_reason == "length"


def test_chat(ckpt, client, tmp_path):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    out = client.chat.completions.create(model="tiny", messages=messages, max_tokens=10,
                                         temperature=0, extra_body={"ignore_eos": True})
    (tmp_path / "m.json").write_text(json.dumps(messages))
    ids = subprocess.run([CLI, "tokenize", "--model", ckpt, "--chat", str(tmp_path / "m.json")],
                         capture_output=True, check=True).stdout.decode().strip().split(",")
    assert out.usage.prompt_tokens == len(ids)
    assert out.choices[0].message.role == "assistant"
    assert out.choices[0].finish_reason == "length" and out.usage.completion_tokens == 10
    stream = client.chat.completions.create(model="tiny", messages=messages, max_tokens=10,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True},
                                            extra_body={"ignore_eos": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == out.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == 10 and not chunks[-1].choices
    # Content given as text parts renders the same prompt.
    parts = [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
             {"role": "user", "content": [{"type": "text", "text": "H"}, {"type": "text",
                                                                           "text": "i"}]}]
    again = client.chat.completions.create(model="tiny", messages=parts, max_tokens=10,
                                           temperature=0, extra_body={"ignore_eos": True})
    assert again.choices[0].message.content == out.choices[0].message.content


def test_16_concurrent_streams(server, client):
    prompts = [PROMPTS[i % len(PROMPTS)] + " " * (i // len(PROMPTS)) for i in range(16)]
    alone = [greedy(client, p, max_tokens=24).choices[0].text for p in prompts]
    got = [None] * 16
    errors = []

    def run(i):
        try:
            s = client.completions.create(model="tiny", prompt=prompts[i], max_tokens=24,
                                          temperature=0, stream=True,
                                          extra_body={"ignore_eos": True})
            got[i] = "".join(c.choices[0].text for c in s)
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert got == alone
    wait_idle(server)


def test_cancel_mid_stream_frees_blocks(server, client):
    before = metrics(server)
    stream = client.completions.create(model="tiny", prompt="Hello", max_tokens=900,
                                       temperature=0.8, stream=True,
                                       extra_body={"ignore_eos": True})
    it = iter(stream)
    for _ in range(3):
        next(it)
    assert metrics(server)["megaops_kv_blocks_used"] > 0
    stream.close()
    after = wait_idle(server)
    assert after["megaops_kv_blocks_used"] == 0
    # Every engine step ran the model inside a loop iteration that took at least as long.
    steps = after["megaops_engine_steps_total"] - before["megaops_engine_steps_total"]
    model = after["megaops_model_step_seconds_count"] - before["megaops_model_step_seconds_count"]
    assert steps >= 3 and model == steps
    assert after["megaops_engine_iteration_seconds_sum"] >= after["megaops_model_step_seconds_sum"]
    aborted = "megaops_request_success_total[finished_reason=abort]"
    assert after[aborted] == before[aborted] + 1
    # Generated far fewer than 900 tokens: the request stopped when the client went away.
    assert (after["megaops_generation_tokens_total"]
            - before["megaops_generation_tokens_total"]) < 900


def test_n_stop_max_tokens_temperature_seed(client):
    kw = dict(model="tiny", prompt="Once upon a time", max_tokens=16, temperature=0.9,
              extra_body={"ignore_eos": True})
    a = client.completions.create(n=3, seed=42, **kw)
    b = client.completions.create(n=3, seed=42, **kw)
    assert [c.index for c in a.choices] == [0, 1, 2]
    texts = [c.text for c in a.choices]
    assert texts == [c.text for c in b.choices]  # a seed reproduces every choice
    assert len(set(texts)) == 3  # choices draw with seeds of their own
    assert a.usage.completion_tokens == 48
    # Choice i draws with seed + i.
    assert client.completions.create(seed=43, **kw).choices[0].text == texts[1]
    # Greedy is deterministic with or without a seed.
    g = [greedy(client, "Once upon a time", max_tokens=16).choices[0].text for _ in range(2)]
    assert g[0] == g[1]
    # max_tokens bounds the completion.
    short = greedy(client, "Once upon a time", max_tokens=3)
    assert short.usage.completion_tokens == 3 and short.choices[0].finish_reason == "length"
    # A stop string ends the text before it.
    text = g[0]
    stop = next((text[i:i + 2] for i in range(len(text) // 2, len(text) - 1)
                 if text[i:i + 2].isascii() and text[i:i + 2].isprintable()), None)
    if stop is not None:
        out = greedy(client, "Once upon a time", max_tokens=16, stop=[stop, "zzzz-never"])
        assert out.choices[0].text == text[:text.index(stop)]
        assert out.choices[0].finish_reason == "stop"


def test_prefix_cache_serves_a_repeated_conversation(server, client):
    """A second turn's prompt starts with the first's: its whole cached blocks are not computed
    again (the metrics count them), and greedy text is the same as on a fresh prompt."""
    messages = [{"role": "system", "content": "You answer questions about the weather. " * 4},
                {"role": "user", "content": "Is it warm?"}]
    before = wait_idle(server)
    first = client.chat.completions.create(model="tiny", messages=messages, max_tokens=6,
                                           temperature=0, extra_body={"ignore_eos": True})
    again = client.chat.completions.create(model="tiny", messages=messages, max_tokens=6,
                                           temperature=0, extra_body={"ignore_eos": True})
    after = wait_idle(server)
    assert again.choices[0].message.content == first.choices[0].message.content
    hits = after["megaops_prefix_cache_hits_total"] - before["megaops_prefix_cache_hits_total"]
    # The repeat finds every whole block of its prompt but the last token's (blocks of 16).
    assert hits >= (first.usage.prompt_tokens - 1) // 16 * 16 > 0
    # OpenAI's usage field says so per request.
    assert again.usage.prompt_tokens_details.cached_tokens == (first.usage.prompt_tokens - 1) // 16 * 16
    assert after["megaops_kv_blocks_cached"] > 0


def test_penalties_and_logit_bias(client):
    """OpenAI's logit_bias and penalties, vLLM's repetition_penalty and min_tokens, through the
    openai client: +100 on one id makes greedy decoding write only it; penalties change greedy
    text; out-of-range values are 400s naming the field."""
    forced = client.completions.create(model="tiny", prompt="Hello", max_tokens=5, temperature=0,
                                       logit_bias={"77": 100}, logprobs=0,
                                       extra_body={"ignore_eos": True})
    assert len(set(forced.choices[0].logprobs.tokens)) == 1
    assert forced.usage.completion_tokens == 5
    plain = greedy(client, "Hello", max_tokens=12)
    penalised = client.completions.create(model="tiny", prompt="Hello", max_tokens=12,
                                          temperature=0, frequency_penalty=2.0,
                                          presence_penalty=1.0,
                                          extra_body={"ignore_eos": True,
                                                      "repetition_penalty": 1.5,
                                                      "min_tokens": 2, "min_p": 0.1})
    assert penalised.choices[0].text != plain.choices[0].text
    for kw, param in [({"presence_penalty": 3}, "presence_penalty"),
                      ({"logit_bias": {"100000": 1}}, "logit_bias.100000"),
                      ({"extra_body": {"min_tokens": 50}}, "min_tokens"),
                      ({"extra_body": {"min_p": 2}}, "min_p")]:
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(model="tiny", prompt="Hello", max_tokens=5, **kw)
        assert e.value.body["param"] == param, e.value.body


def test_tokenize_and_detokenize(ckpt, server):
    got, out = post(server.url + "/tokenize", {"model": "tiny", "prompt": "Hello world"})
    assert got == 200 and out["count"] == len(out["tokens"]) and out["max_model_len"] == 1024
    ids = subprocess.run([CLI, "tokenize", "--model", ckpt, "--text", "Hello world"],
                         capture_output=True, check=True).stdout.decode().strip().split(",")
    assert out["tokens"] == [int(i) for i in ids]
    got, back = post(server.url + "/detokenize", {"tokens": out["tokens"]})
    assert got == 200 and back["prompt"].endswith("Hello world")
    got, chat = post(server.url + "/tokenize",
                     {"messages": [{"role": "user", "content": "Hi"}]})
    assert got == 200 and chat["count"] > 3
    got, err = post(server.url + "/detokenize", {"tokens": [1, 10 ** 9]})
    assert got == 400 and err["error"]["param"] == "tokens[1]"


def test_chat_with_tools(server, client):
    """Tools reach the template (a longer prompt) and tool_choice is honoured; the random model
    writes no call, so its reply is content (the calls themselves: http_tool_calls_test.cpp)."""
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}]
    plain = client.chat.completions.create(model="tiny", messages=messages, max_tokens=4,
                                           temperature=0, extra_body={"ignore_eos": True})
    for choice in ("auto", "none"):
        out = client.chat.completions.create(model="tiny", messages=messages, tools=tools,
                                             tool_choice=choice, max_tokens=4, temperature=0,
                                             extra_body={"ignore_eos": True})
        assert out.usage.prompt_tokens > plain.usage.prompt_tokens
        assert out.choices[0].finish_reason == "length"
        assert not out.choices[0].message.tool_calls
    with pytest.raises(openai.BadRequestError, match="guided decoding"):
        client.chat.completions.create(model="tiny", messages=messages, tools=tools,
                                       tool_choice="required", max_tokens=4)
    # A follow-up turn with the call and its result renders (arguments as JSON text).
    history = messages + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C"}]
    out = client.chat.completions.create(model="tiny", messages=history, tools=tools,
                                         max_tokens=2, temperature=0,
                                         extra_body={"ignore_eos": True})
    assert out.usage.completion_tokens == 2


BAD = [
    (b'{"prompt": "Hello", "max_tokens": ', 400, None),
    ({"model": "gpt-4", "prompt": "Hello"}, 404, "model"),
    ({"prompt": "Hello", "max_tokens": "ten"}, 400, "max_tokens"),
    ({"prompt": "Hello", "max_tokens": -1}, 400, "max_tokens"),
    ({"prompt": "Hello", "max_tokens": 10 ** 12}, 400, "max_tokens"),
    ({"prompt": "Hello", "max_tokens": 1020}, 400, "max_tokens"),
    ({"prompt": "x " * 1100, "max_tokens": 4}, 400, "prompt"),
    ({"prompt": "Hello", "temperature": "hot"}, 400, "temperature"),
    ({"prompt": "Hello", "temperature": -1}, 400, "temperature"),
    ({"prompt": "Hello", "top_p": 2}, 400, "top_p"),
    ({"prompt": "Hello", "n": 0}, 400, "n"),
    ({"prompt": "Hello", "stream": "yes"}, 400, "stream"),
    ({"prompt": "Hello", "stop": [""]}, 400, "stop"),
    ({"prompt": "Hello", "stop": 5}, 400, "stop"),
    ({"prompt": "Hello", "logprobs": 6}, 400, "logprobs"),
    ({"prompt": "Hello", "logprobs": -1}, 400, "logprobs"),
    ({"prompt": "Hello", "logprobs": "3"}, 400, "logprobs"),
    ({"prompt": "Hello", "echo": True, "logprobs": 1}, 400, "echo"),
    ({"prompt": [1, 2, 99999]}, 400, "prompt[2]"),
    ({"prompt": 42}, 400, "prompt"),
    ({"max_tokens": 4}, 400, "prompt"),
    ([1, 2], 400, None),
]


def test_bad_inputs_are_4xx_and_the_server_keeps_serving(server, client):
    url = server.url + "/v1/completions"
    for body, status, param in BAD:
        got, err = post(url, body, raw=isinstance(body, bytes))
        assert got == status, (body, err)
        assert err["error"]["param"] == param, (body, err)
        assert err["error"]["message"], body
        # A good request right after each bad one.
        assert greedy(client, "Hello", max_tokens=2).usage.completion_tokens == 2
    chat = server.url + "/v1/chat/completions"
    for body, param in [({"messages": "hi"}, "messages"),
                        ({"messages": []}, "messages"),
                        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
                        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
                        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
                         "max_tokens")]:
        got, err = post(chat, body)
        assert got == 400 and err["error"]["param"] == param, (body, err)
    # An oversized body (over the default 4 MiB): 413 with a JSON body.
    got, err = post(url, b'{"prompt": "' + b"a" * (5 << 20) + b'"}', raw=True)
    assert got == 413 and "larger than" in err["error"]["message"]
    # The client raises the matching errors.
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="tiny", prompt="Hello", max_tokens=-5)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="Hello")
    assert greedy(client, "Hello", max_tokens=2).usage.completion_tokens == 2
    wait_idle(server)


def test_sigterm_drains_running_requests_and_exits_zero(slow_ckpt):
    s = Server(slow_ckpt, "--max-batch", "2", "--max-context", "1024", "--drain-seconds", "60")
    client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    stream = client.completions.create(model="slow", prompt="Hello", max_tokens=600,
                                       temperature=0.8, stream=True,
                                       extra_body={"ignore_eos": True})
    it = iter(stream)
    first = next(it)
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    status, err = post(s.url + "/v1/completions", {"prompt": "Hello", "max_tokens": 2})
    refused = status == 503 and "shutting down" in err["error"]["message"]
    rest = list(it)
    # The running request finished in full: every token, then its finish reason.
    assert rest[-1].choices[0].finish_reason == "length"
    assert len([first] + rest) >= 2
    assert sum(1 for c in [first] + rest if c.choices[0].text) <= 600
    assert s.stop() == 0, "".join(s.log)
    assert "serve: draining 1 running" in "".join(s.log)
    assert refused, (status, err)


def test_drain_deadline_aborts_what_is_left(slow_ckpt):
    s = Server(slow_ckpt, "--max-batch", "2", "--max-context", "1024", "--drain-seconds", "0")
    client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    stream = client.completions.create(model="slow", prompt="Hello", max_tokens=1000,
                                       temperature=0.8, stream=True,
                                       extra_body={"ignore_eos": True})
    it = iter(stream)
    next(it)
    s.proc.send_signal(signal.SIGTERM)
    with pytest.raises(openai.APIError, match="shutting down"):
        list(it)
    assert s.stop() == 0, "".join(s.log)
    assert "aborting 1 requests" in "".join(s.log)


def test_api_key_guards_the_api_but_not_health(ckpt):
    s = Server(ckpt, "--api-key", "s3cret", "--max-context", "256")
    try:
        good = openai.OpenAI(base_url=s.url + "/v1", api_key="s3cret", max_retries=0, timeout=60)
        assert good.completions.create(model="tiny", prompt="Hi", max_tokens=2,
                                       extra_body={"ignore_eos": True}).usage.completion_tokens == 2
        assert [m.id for m in good.models.list()] == ["tiny"]
        for key in ("wrong", "s3cre", "s3cret!"):
            bad = openai.OpenAI(base_url=s.url + "/v1", api_key=key, max_retries=0, timeout=60)
            with pytest.raises(openai.AuthenticationError):
                bad.completions.create(model="tiny", prompt="Hi", max_tokens=2)
        got, err = post(s.url + "/tokenize", {"prompt": "Hi"})
        assert got == 401 and "API key" in err["error"]["message"]
        with urllib.request.urlopen(s.url + "/health", timeout=30) as r:
            assert r.status == 200
        with urllib.request.urlopen(s.url + "/version", timeout=30) as r:
            assert json.loads(r.read())["version"]
    finally:
        assert s.stop() == 0, "".join(s.log)


def test_chat_template_flag_replaces_the_checkpoints(ckpt, tmp_path):
    template = "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}>"
    path = tmp_path / "t.jinja"
    path.write_text(template)
    want = subprocess.run([CLI, "tokenize", "--model", ckpt, "--text", "[user]Hi>",
                           "--no-special"], capture_output=True, check=True).stdout.decode()
    for given in (str(path), template):
        s = Server(ckpt, "--chat-template", given, "--max-context", "256")
        try:
            got, out = post(s.url + "/tokenize", {"messages": [{"role": "user", "content": "Hi"}]})
            assert got == 200 and out["tokens"] == [int(i) for i in want.strip().split(",")]
        finally:
            assert s.stop() == 0, "".join(s.log)
    bad = subprocess.run([CLI, "serve", "--model", ckpt, "--cpu", "--port", "0",
                          "--chat-template", "{% for %}"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode != 0
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and "--chat-template" in lines[0] and "does not parse" in lines[0], lines
    for args, fragment in [(["--chat-template", "/no/such/template.jinja"], "is no file"),
                           (["--tool-call-parser", "mistral"], "--tool-call-parser"),
                           (["--reasoning-parser", "o1"], "--reasoning-parser")]:
        bad = subprocess.run([CLI, "serve", "--model", ckpt, "--cpu", "--port", "0", *args],
                             capture_output=True, text=True, timeout=60)
        lines = bad.stderr.strip().splitlines()
        assert bad.returncode != 0 and len(lines) == 1 and fragment in lines[0], (args, lines)


def test_stats_lines_are_logged_while_requests_run(ckpt):
    # vLLM's names of the batch, context and step-budget flags are taken too.
    s = Server(ckpt, "--log-stats-interval", "0.2", "--max-model-len", "256", "--max-num-seqs",
               "4", "--max-num-batched-tokens", "64")
    try:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=60)
        client.completions.create(model="tiny", prompt="Hi", max_tokens=40,
                                  extra_body={"ignore_eos": True})
        time.sleep(0.5)
    finally:
        assert s.stop() == 0, "".join(s.log)
    lines = [l for l in "".join(s.log).splitlines() if "generation" in l and "tok/s" in l]
    assert lines and "KV cache" in lines[0] and "prefix cache hits" in lines[0], s.log
    bad = subprocess.run([CLI, "serve", "--model", ckpt, "--cpu", "--log-stats-interval", "-1"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "--log-stats-interval" in bad.stderr


def test_echo_prepends_the_prompt(client):
    whole = client.completions.create(model="tiny", prompt="Once upon", max_tokens=6,
                                      temperature=0, echo=True, extra_body={"ignore_eos": True})
    plain = greedy(client, "Once upon", max_tokens=6)
    assert whole.choices[0].text == "Once upon" + plain.choices[0].text
    chunks = list(client.completions.create(model="tiny", prompt="Once upon", max_tokens=6,
                                            temperature=0, echo=True, stream=True,
                                            extra_body={"ignore_eos": True}))
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert chunks[0].choices[0].text.startswith("Once upon")
    with pytest.raises(openai.BadRequestError, match="prompt's logprobs"):
        client.completions.create(model="tiny", prompt="x", max_tokens=2, echo=True, logprobs=1)
