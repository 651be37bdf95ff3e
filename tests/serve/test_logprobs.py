"""logprobs through `megaops serve` on the CPU oracle with the official openai client:
/v1/completions' integer logprobs ({tokens, token_logprobs, top_logprobs, text_offset}) and chat's
logprobs + top_logprobs ({content: [{token, logprob, bytes, top_logprobs}]}), streamed chunk by
chunk and not, the same either way; greedy tokens lead their top list; bad values get a 400
naming the field and the server keeps serving."""
import json
import math
import urllib.error
import urllib.request

import pytest

openai = pytest.importorskip("openai")

MESSAGES = [{"role": "user", "content": "Tell me a story about a cat"}]


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def completion(client, stream=False, **kw):
    kw = {"max_tokens": 8, "temperature": 0, **kw}
    return client.completions.create(model="tiny", prompt="Once upon a time", stream=stream,
                                     extra_body={"ignore_eos": True}, **kw)


def chat(client, stream=False, **kw):
    kw = {"max_tokens": 8, "temperature": 0, **kw}
    return client.chat.completions.create(model="tiny", messages=MESSAGES, stream=stream,
                                          extra_body={"ignore_eos": True}, **kw)


def test_completions_logprobs(client):
    out = completion(client, logprobs=3)
    c = out.choices[0]
    lp = c.logprobs
    n = out.usage.completion_tokens
    assert n == 8
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == n
    assert lp.text_offset[0] == 0
    for i in range(n):
        assert lp.token_logprobs[i] <= 0
        top = lp.top_logprobs[i]
        # The top 3 and the sampled token (vLLM's rule): 3 or 4 entries, greedy's the largest.
        assert 3 <= len(top) <= 4, top
        assert lp.tokens[i] in top
        assert math.isclose(max(top.values()), lp.token_logprobs[i], abs_tol=1e-6), top
        if i > 0:
            assert lp.text_offset[i] == lp.text_offset[i - 1] + len(lp.tokens[i - 1])
    if "\ufffd" not in c.text:
        assert "".join(lp.tokens) == c.text
    # Without logprobs: null, as before.
    assert completion(client).choices[0].logprobs is None
    # logprobs=0: the sampled token's value only.
    zero = completion(client, logprobs=0).choices[0].logprobs
    assert zero.token_logprobs == lp.token_logprobs
    assert all(len(t) == 1 for t in zero.top_logprobs)


def test_completions_logprobs_streamed_match(client):
    want = completion(client, logprobs=3).choices[0].logprobs
    tokens, values, tops, offsets = [], [], [], []
    for chunk in completion(client, stream=True, logprobs=3):
        for ch in chunk.choices:
            if ch.logprobs is None:
                continue
            tokens += ch.logprobs.tokens
            values += ch.logprobs.token_logprobs
            tops += ch.logprobs.top_logprobs
            offsets += ch.logprobs.text_offset
    assert tokens == want.tokens
    assert values == want.token_logprobs
    assert tops == want.top_logprobs
    assert offsets == want.text_offset


def test_chat_logprobs(client):
    out = chat(client, logprobs=True, top_logprobs=2)
    content = out.choices[0].logprobs.content
    assert len(content) == out.usage.completion_tokens == 8
    for t in content:
        assert t.logprob <= 0
        assert bytes(t.bytes).decode("utf-8", "replace") == t.token
        assert len(t.top_logprobs) == 2
        assert t.top_logprobs[0].token == t.token  # greedy: the most likely token
        assert t.top_logprobs[0].logprob == t.logprob
        assert t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob
    # logprobs without top_logprobs: no alternatives; the same values.
    plain = chat(client, logprobs=True).choices[0].logprobs.content
    assert [(t.token, t.logprob, t.top_logprobs) for t in plain] == \
        [(t.token, t.logprob, []) for t in content]
    assert chat(client).choices[0].logprobs is None

    streamed = []
    for chunk in chat(client, stream=True, logprobs=True, top_logprobs=2):
        for ch in chunk.choices:
            if ch.logprobs is not None:
                streamed += ch.logprobs.content
    assert [t.model_dump() for t in streamed] == [t.model_dump() for t in content]


def test_sampled_logprobs_are_raw(client):
    """Of the raw logits, before temperature: a hot request's first token has the greedy one's top
    list, with the same values, whatever it drew."""
    greedy = completion(client, logprobs=2).choices[0].logprobs.top_logprobs[0]
    assert len(greedy) == 2
    for seed in range(3):
        hot = completion(client, logprobs=2, temperature=1.7, seed=seed, max_tokens=1)
        lp = hot.choices[0].logprobs
        top = lp.top_logprobs[0]
        for token, value in greedy.items():
            assert math.isclose(top[token], value, abs_tol=1e-6), (top, greedy)
        assert lp.token_logprobs[0] <= max(greedy.values())


BAD = [
    (False, {"logprobs": 6}, "logprobs"),
    (False, {"logprobs": -1}, "logprobs"),
    (False, {"logprobs": 2.5}, "logprobs"),
    (False, {"logprobs": True}, "logprobs"),
    (False, {"echo": True, "logprobs": 1}, "echo"),
    (True, {"top_logprobs": 2}, "top_logprobs"),
    (True, {"logprobs": False, "top_logprobs": 2}, "top_logprobs"),
    (True, {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    (True, {"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
    (True, {"logprobs": 3}, "logprobs"),
    (True, {"logprobs": "yes"}, "logprobs"),
]


def test_bad_logprobs_are_400_naming_the_field(server, client):
    for is_chat, extra, param in BAD:
        if is_chat:
            url, body = server.url + "/v1/chat/completions", {"messages": MESSAGES}
        else:
            url, body = server.url + "/v1/completions", {"prompt": "Hello"}
        body.update(extra, max_tokens=2)
        status, err = post(url, body)
        assert status == 400, (body, err)
        assert err["error"]["param"] == param, (body, err)
        assert param in err["error"]["message"], (body, err)
        assert completion(client, logprobs=1).usage.completion_tokens == 8
    with pytest.raises(openai.BadRequestError):
        chat(client, top_logprobs=2)
