"""megaops.LLM, the engine from Python, on the fp32 CPU oracle and, where there is one, on the GPU
(each test runs on both devices): batched generation gives each request the tokens it gets alone
(greedy and seeded), per-request sampling parameters, streaming pieces that add up to the generated
text, an early-closed stream aborts its request (no KV block left in use), stop strings, and bad
parameters are one ValueError naming the field."""
import threading

import pytest

import megaops

needs_gpu = pytest.mark.skipif(not megaops.gpu_available(),
                               reason="needs a CUDA device and a megaops module built with CUDA "
                                      f"(megaops.has_cuda: {megaops.has_cuda})")

PROMPTS = ["Hello", "Once upon a time", [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17],
           "The model writes"]


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=needs_gpu)])
def device(request):
    return request.param


def llm(ckpt, device, **kw):
    return megaops.LLM(ckpt, device=device, max_context=256, **kw)


def params(i, **kw):
    base = dict(max_tokens=6 + i, ignore_eos=True, temperature=0.0)
    base.update(kw)
    return megaops.SamplingParams(**base)


def test_batched_generation_matches_each_request_alone(ckpt, device):
    sampling = [params(0), params(1, temperature=0.9, seed=7), params(2, temperature=0.8,
                                                                       top_k=40, seed=3),
                params(3, temperature=0.7, top_p=0.9, seed=11)]
    alone = [llm(ckpt, device, max_batch=1).generate(p, s)[0] for p, s in zip(PROMPTS, sampling)]
    together = llm(ckpt, device, max_batch=4, max_step_tokens=8).generate(PROMPTS, sampling)
    assert [o.token_ids for o in together] == [o.token_ids for o in alone]
    assert [o.text for o in together] == [o.text for o in alone]
    for i, o in enumerate(together):
        assert len(o.token_ids) == 6 + i and o.finish_reason == "length"
        assert o.ttft_s > 0
    # The Model API (one request at a time) is a client of the same engine.
    m = megaops.load(ckpt, device=device, max_context=256)
    assert m.generate(PROMPTS[1], max_new_tokens=7, temperature=0.9, seed=7,
                      ignore_eos=True)["tokens"] == together[1].token_ids


def test_stream_pieces_add_up_and_early_close_aborts(ckpt, device):
    engine = llm(ckpt, device, max_batch=2)
    assert engine.backend.startswith("GPU" if device == "cuda" else "CPU oracle")
    p = params(0, max_tokens=12)
    whole = engine.generate("Hello", p)[0]
    pieces = list(engine.stream("Hello", p))
    assert sum((d.token_ids for d in pieces), []) == whole.token_ids
    assert "".join(d.text for d in pieces) == whole.text
    assert pieces[-1].finish_reason == "length"
    assert all(d.finish_reason is None for d in pieces[:-1])
    it = engine.stream("Hello", megaops.SamplingParams(max_tokens=200, ignore_eos=True))
    next(it)
    assert engine.stats()["kv_blocks_used"] > 0
    it.close()
    assert engine.stats()["kv_blocks_used"] == 0
    # The engine runs on: the aborted request's last output is not handed to anyone.
    assert engine.generate("Hello", p)[0].token_ids == whole.token_ids


def test_stop_strings_end_the_text_before_them(ckpt, device):
    engine = llm(ckpt, device)
    full = engine.generate("The model writes", params(0, max_tokens=30, temperature=0.9,
                                                        seed=5))[0]
    text = full.text
    stop = next((text[i:i + 2] for i in range(len(text) // 2, len(text) - 1)
                 if text[i:i + 2].isascii() and text[i:i + 2].isprintable()), None)
    if stop is None:
        pytest.skip("the random text has no plain stretch to stop on")
    out = engine.generate("The model writes", params(0, max_tokens=30, temperature=0.9, seed=5,
                                                       stop=[stop]))[0]
    assert out.text == text[:text.index(stop)]
    assert out.finish_reason == "stop" and out.stop_reason == "stop string"


def test_threads_share_one_llm(ckpt, device):
    engine = llm(ckpt, device, max_batch=4)
    want = [engine.generate(p, params(i))[0].token_ids for i, p in enumerate(PROMPTS)]
    got = [None] * len(PROMPTS)

    def run(i):
        got[i] = engine.generate(PROMPTS[i], params(i))[0].token_ids

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == want
    assert engine.stats()["kv_blocks_used"] == 0


def test_bad_parameters_name_the_field(ckpt, device):
    engine = llm(ckpt, device, max_batch=2)
    with pytest.raises(ValueError, match="max_tokens: the context is 256"):
        engine.generate("Hello", megaops.SamplingParams(max_tokens=1000))
    with pytest.raises(ValueError, match="temperature"):
        engine.generate("Hello", megaops.SamplingParams(temperature=-0.5))
    with pytest.raises(ValueError, match="top_p"):
        engine.generate("Hello", megaops.SamplingParams(top_p=2.0))
    with pytest.raises(ValueError, match="prompt"):
        engine.generate([[1, 100000]])
    with pytest.raises(ValueError, match="sampling_params: expected 1 or 2"):
        engine.generate(["a", "b"], [params(0)] * 3)
    with pytest.raises(ValueError, match="device"):
        megaops.LLM(ckpt, device="tpu")
    with pytest.raises(ValueError, match="max_batch"):
        megaops.LLM(ckpt, device=device, max_batch=0)
    assert engine.stats()["kv_blocks_used"] == 0
    assert engine.generate("Hello", params(0))[0].finish_reason == "length"


@pytest.mark.skipif(megaops.gpu_available(), reason="a GPU is available here")
def test_without_a_gpu_device_cuda_is_one_error(ckpt):
    with pytest.raises(ValueError, match="device: cuda asked for") as err:
        megaops.LLM(ckpt, device="cuda")
    assert "\n" not in str(err.value)
    assert megaops.LLM(ckpt, max_context=64).backend.startswith("CPU oracle")  # auto: the CPU


def test_logprobs_are_raw_and_the_same_batched_or_streamed(ckpt, device):
    """SamplingParams.logprobs: per token {id: Logprob} of the top-N and the sampled token; greedy's
    token ranks first; values of the raw logits (a hot request's first top list is greedy's); the
    same batched, alone and streamed; None without."""
    engine = llm(ckpt, device, max_batch=4)
    greedy = params(0, logprobs=3)
    alone = engine.generate("Once upon a time", greedy)[0]
    assert len(alone.logprobs) == len(alone.token_ids) == 6
    for token, step in zip(alone.token_ids, alone.logprobs):
        assert len(step) == 3
        assert step[token].rank == 1
        assert max(v.logprob for v in step.values()) == step[token].logprob <= 0
    hot = params(0, logprobs=3, temperature=1.5, seed=5)
    outs = engine.generate(["Hello", "Once upon a time", "Once upon a time"],
                           [params(1), greedy, hot])
    assert outs[0].logprobs is None
    assert outs[1].token_ids == alone.token_ids
    for got, want in zip(outs[1].logprobs, alone.logprobs):
        assert got.keys() == want.keys()
        for t in got:
            assert got[t].logprob == pytest.approx(want[t].logprob, abs=1e-4)
    top = {t: v for t, v in outs[2].logprobs[0].items() if v.rank is not None}
    assert {t: v.rank for t, v in top.items()} == {t: v.rank for t, v in alone.logprobs[0].items()}
    streamed = []
    for delta in engine.stream("Once upon a time", greedy):
        streamed += delta.logprobs
    assert [{t: v.logprob for t, v in s.items()} for s in streamed] == \
        [{t: v.logprob for t, v in s.items()} for s in alone.logprobs]
    with pytest.raises(ValueError, match="logprobs"):
        engine.generate("Hello", params(0, logprobs=21))


def test_prefix_caching_reuses_blocks_and_keeps_the_tokens(ckpt, device):
    shared = [(7 * i * i + 3 * i + 5) % 400 + 3 for i in range(40)]  # 2 whole blocks of 16
    prompts = [shared + [11, 12, 13], shared + [21, 22, 23, 24, 25], shared + [11, 12, 13]]
    sampling = [params(i) for i in range(3)]
    outs = {}
    for caching in (False, True):
        engine = llm(ckpt, device, max_batch=1, enable_prefix_caching=caching)
        outs[caching] = [engine.generate(p, s)[0].token_ids for p, s in zip(prompts, sampling)]
        stats = engine.stats()
        assert stats["prefix_caching"] is caching
        assert stats["kv_blocks_used"] == 0
        # The second and third prompts find the first one's two whole blocks (the third is the
        # first again, but its last token and those after it are computed: 42 positions looked
        # up hold two whole blocks).
        assert stats["prefix_cache_hits_total"] == (2 * 32 if caching else 0)
    assert outs[True] == outs[False]


def test_penalties_and_biases_are_the_same_batched_and_on_every_device(ckpt, device):
    engine = llm(ckpt, device, max_batch=4, max_step_tokens=8)
    plain = params(0, max_tokens=10)
    biased = params(0, max_tokens=10, logit_bias={77: 100.0})
    penalised = params(0, max_tokens=10, repetition_penalty=1.5, frequency_penalty=1.0,
                       presence_penalty=0.5)
    outs = engine.generate(["Hello"] * 3, [plain, biased, penalised])
    assert outs[1].token_ids == [77] * 10  # +100 wins every greedy step
    assert outs[2].token_ids != outs[0].token_ids
    # Each alone: the same tokens (the host sampler draws from the request's own stream).
    for o, p in zip(outs, [plain, biased, penalised]):
        assert llm(ckpt, device, max_batch=1).generate("Hello", p)[0].token_ids == o.token_ids
    # min_tokens holds EOS back: EOS at +100 ends the request right after it.
    eos = megaops.LLM(ckpt, device=device, max_context=256)
    held = eos.generate("Hello", megaops.SamplingParams(max_tokens=10, temperature=0.0,
                                                         min_tokens=3, logit_bias={2: 100.0}))[0]
    assert held.finish_reason == "stop" and len(held.token_ids) == 4
    with pytest.raises(ValueError, match="presence_penalty"):
        engine.generate("Hello", params(0, presence_penalty=5.0))


def test_chat_renders_the_template_like_the_server(ckpt, device):
    engine = megaops.LLM(ckpt, device=device, max_context=1024, max_batch=2)
    conversation = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    m = megaops.load(ckpt, device="cpu", max_context=256)
    ids = engine._engine.encode(m.apply_chat_template(conversation, True, None), False)
    want = engine.generate(ids, params(0))[0]
    got = engine.chat(conversation, params(0))
    assert len(got) == 1 and got[0].token_ids == want.token_ids
    assert got[0].prompt_token_ids == ids
    # Several conversations; tools and template variables reach the template.
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    both = engine.chat([conversation, conversation[1:]], params(0), tools=tools,
                       chat_template_kwargs={"enable_thinking": False})
    assert len(both) == 2 and len(both[0].prompt_token_ids) > len(ids)
    with pytest.raises(ValueError, match="chat_template_kwargs"):
        engine.chat([{"role": "user", "content": "x"}], params(0), add_generation_prompt=True,
                    chat_template_kwargs={"bad": float("nan")})
