"""megaops: dense decoder LLM inference (Llama 3, Qwen 3) from Python.

    import megaops
    llm = megaops.LLM("ckpt/", max_batch=8)        # the engine: requests batched continuously
    outs = llm.generate(["Hello", "Once upon"], megaops.SamplingParams(max_tokens=32))
    for piece in llm.stream("Hello", megaops.SamplingParams(max_tokens=32, temperature=0.8)):
        print(piece.text, end="")

    m = megaops.load("ckpt/")                      # weights, tokenizer, chat template
    prompt = m.apply_chat_template([{"role": "user", "content": "Hi"}])
    out = m.generate(prompt, max_new_tokens=32, on_text=print)
    logits = torch.from_dlpack(m.forward(m.encode("Hello")))

On the GPU (a build with CUDA), the step executor and the executor's kernels on CUDA tensors:

    ex = megaops.Executor("ckpt/", max_batch=2, max_seq=512)   # or a preset: "tiny-llama3"
    first = ex.prefill([ids_a, ids_b])                          # first token of each sequence
    nxt = ex.decode_step()                                      # or decode_step(forced=[...])
    logits = torch.from_dlpack(ex.logits())                     # [batch, vocab] on the GPU
    y = torch.from_dlpack(megaops.cuda_ops.matmul(x_bf16, w_bf16))
"""
import ctypes
import glob
import json
import importlib.util
import os
import re
import threading
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Union


# What a CUDA build links dynamically besides the driver (CUDA 13's cuBLASLt).
_CUBLASLT = "libcublasLt.so.13"


def _pip_cuda_library(soname: str) -> Optional[str]:
    """The copy of a CUDA library that NVIDIA's pip packages put beside PyTorch (nvidia/*/lib)."""
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        found = sorted(glob.glob(os.path.join(root, "*", "lib", soname)))
        if found:
            return found[0]
    return None


def _find_cuda_library(soname: str) -> Optional[str]:
    """Where a CUDA library the loader did not find lies: the toolkit's lib64 ($CUDA_HOME or
    /usr/local/cuda), else NVIDIA's pip packages."""
    dirs = [os.path.join(os.environ[v], "lib64") for v in ("CUDA_HOME", "CUDA_PATH")
            if os.environ.get(v)]
    dirs += ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"]
    for path in [os.path.join(d, soname) for d in dirs]:
        if os.path.exists(path):
            return path
    return _pip_cuda_library(soname)


def _import_extension():
    """Imports the compiled module. Where PyTorch's pip cuBLAS is installed, its cuBLASLt is loaded
    first: a process holds one library of a soname, the first loaded, and PyTorch's cuBLAS needs
    the cuBLASLt it ships with (the toolkit's may be an older minor version), while megaops, built
    against CUDA 13.0, runs on any 13.x. Where the loader's path lacks a library the extension
    links (a wheel on a machine whose toolkit lib64 is not on LD_LIBRARY_PATH), it is loaded from
    where _find_cuda_library finds it and the import tried again: the extension's dependency is
    then resolved by its soname."""
    pip_lt = _pip_cuda_library(_CUBLASLT)
    if pip_lt:
        try:
            ctypes.CDLL(pip_lt, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            pass  # the loader's own search below, as without PyTorch
    loaded = set()
    while True:
        try:
            from . import _megaops
            return _megaops
        except ImportError as err:
            missing = re.match(r"(lib[\w.+-]+\.so[.\d]*): cannot open shared object file", str(err))
            if not missing or missing.group(1) in loaded:
                raise
            path = _find_cuda_library(missing.group(1))
            if path is None:
                raise
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            loaded.add(missing.group(1))


_ext = _import_extension()
_LLM, Executor, Model, cuda_ops = _ext._LLM, _ext.Executor, _ext.Model, _ext.cuda_ops
gpu_available, has_cuda, ops = _ext.gpu_available, _ext.has_cuda, _ext.ops

__all__ = ["CompletionOutput", "Executor", "LLM", "Logprob", "Model", "SamplingParams",
           "StreamDelta", "chat", "cuda_ops", "gpu_available", "has_cuda", "load", "ops"]


def load(path, device="auto", max_context=4096, plan=""):
    """Loads a Hugging Face checkpoint directory; device is "auto", "cpu" or "cuda". On the GPU,
    generation runs `plan` (a megaops-plan JSON file, e.g. from `megaops plan --out`; default: the
    fastest measured plan for one sequence, as the CLI picks)."""
    return Model(path, device, max_context, plan)


def chat(model, messages, extra=None, **generate_options):
    """Renders `messages` with the checkpoint's chat template and generates the reply. The template
    writes the special tokens itself (BOS included), so the prompt is tokenized without adding
    any, as transformers' apply_chat_template(tokenize=True) does."""
    prompt = model.apply_chat_template(messages, True, extra)
    return model.generate(model.encode(prompt, add_special_tokens=False), **generate_options)


@dataclass
class SamplingParams:
    """One request's sampling and stop conditions (vLLM's names). temperature / top_p / top_k left
    None take generation_config.json's values when it samples, else greedy; seed None draws a
    random one (a request with a seed gives the same tokens alone or batched)."""
    max_tokens: int = 16
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    top_k: Optional[int] = None
    seed: Optional[int] = None
    stop: Sequence[str] = ()
    stop_token_ids: Sequence[int] = ()
    ignore_eos: bool = False
    # Per generated token, the log-probabilities of it and of the `logprobs` most likely tokens
    # (0..20; None: off), of the raw logits before temperature / top-k / top-p (vLLM's default).
    logprobs: Optional[int] = None
    # Applied to the logits before temperature / top-k / top-p, as vLLM defines them: logit_bias
    # ({token id: -100..100}), then repetition_penalty (> 0; prompt and output ids),
    # frequency_penalty and presence_penalty (-2..2; output ids), then min_tokens (EOS and
    # stop_token_ids held back before that many tokens); min_p (0..1) drops tokens less likely
    # than min_p times the most likely one after temperature.
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: Optional[Dict[int, float]] = None
    min_tokens: int = 0
    min_p: float = 0.0


@dataclass
class Logprob:
    """A token's log-probability at one position; rank: its place in the top list (1: the most
    likely), None for a sampled token outside it."""
    logprob: float
    rank: Optional[int] = None


@dataclass
class CompletionOutput:
    """A finished request: its prompt ids, generated ids (the EOS or stop token included), text
    (cut before a stop string), why it ended ("stop", "length", "abort"; stop_reason says "eos",
    "stop token", "stop string" or "length") and its time to first token."""
    prompt_token_ids: List[int]
    token_ids: List[int] = field(default_factory=list)
    text: str = ""
    finish_reason: Optional[str] = None
    stop_reason: str = ""
    ttft_s: float = -1.0
    # With SamplingParams.logprobs: per generated token {token id: Logprob} of the top-N and the
    # sampled token (vLLM's shape); None without.
    logprobs: Optional[List[Dict[int, Logprob]]] = None


@dataclass
class StreamDelta:
    """What one engine step added to a streamed request: new ids, the text that became final, and,
    on the last one, why it ended."""
    token_ids: List[int]
    text: str
    finish_reason: Optional[str] = None
    logprobs: Optional[List[Dict[int, Logprob]]] = None  # as CompletionOutput.logprobs


class LLM:
    """The megaops engine over one checkpoint: requests are batched continuously (up to max_batch
    decode together, prompts prefilled in chunks beside them) over a paged KV cache of kv_blocks
    blocks of block_size positions (0: on the GPU as many as fit in gpu_memory_utilization of its
    memory, at most max_batch requests of max_context; on the CPU exactly that). device "auto"
    runs the GPU where there is one (the paged runner, max_batch 1..64), else the fp32 CPU oracle.
    enable_prefix_caching (vLLM's automatic prefix caching): a prompt that starts as an earlier
    one did reuses its K/V blocks. Several threads may share one LLM."""

    def __init__(self, model: str, device: str = "auto", max_context: int = 4096,
                 max_batch: int = 8, kv_blocks: int = 0, block_size: int = 16,
                 max_step_tokens: int = 0, plan: str = "", gpu_memory_utilization: float = 0.9,
                 enable_prefix_caching: bool = True):
        self._engine = _LLM(model, device, max_context, max_batch, kv_blocks, block_size,
                            max_step_tokens, plan, gpu_memory_utilization, enable_prefix_caching)
        self._outputs = {}  # request id -> outputs of other callers' requests, not yet taken
        self._dropped = set()  # aborted requests whose last output is still to come
        self._lock = threading.Lock()  # guards the two above (threads sharing one LLM)

    @property
    def backend(self) -> str:
        return self._engine.backend

    def stats(self) -> dict:
        """Queue depth, running requests, KV blocks used/free, token counters."""
        return self._engine.stats()

    def _add(self, prompt, params: Optional[SamplingParams]) -> int:
        p = params or SamplingParams()
        seed = p.seed if p.seed is not None else int.from_bytes(os.urandom(8), "little")
        return self._engine.add_request(
            prompt, p.max_tokens, -1.0 if p.temperature is None else p.temperature,
            -1 if p.top_k is None else p.top_k, -1.0 if p.top_p is None else p.top_p, seed,
            list(p.stop), list(p.stop_token_ids), p.ignore_eos,
            -1 if p.logprobs is None else p.logprobs, p.presence_penalty, p.frequency_penalty,
            p.repetition_penalty, dict(p.logit_bias or {}), p.min_tokens, p.min_p)

    def _step(self, rid: int) -> list:
        """One engine step; keeps every output until its request's caller takes it, and returns
        (takes) request rid's."""
        with self._lock:
            for out in self._engine.step():
                if out["id"] in self._dropped:
                    if out["finished"]:
                        self._dropped.discard(out["id"])
                    continue
                self._outputs.setdefault(out["id"], []).append(out)
            return self._outputs.pop(rid, [])

    def _abort(self, rid: int) -> None:
        with self._lock:
            if self._engine.abort(rid):
                self._dropped.add(rid)
            self._outputs.pop(rid, None)

    def generate(self, prompts: Union[str, List[int], Sequence[Union[str, List[int]]]],
                 sampling_params: Union[None, SamplingParams, Sequence[SamplingParams]] = None
                 ) -> List[CompletionOutput]:
        """Runs every prompt (a str, tokenized with special tokens, or a list of ids) to its end,
        batched, and returns one CompletionOutput per prompt in order. sampling_params: one for
        all, or one per prompt."""
        single = isinstance(prompts, str) or (
            isinstance(prompts, list) and prompts and isinstance(prompts[0], int))
        prompts = [prompts] if single else list(prompts)
        if sampling_params is None or isinstance(sampling_params, SamplingParams):
            sampling_params = [sampling_params] * len(prompts)
        if len(sampling_params) != len(prompts):
            raise ValueError(f"sampling_params: expected 1 or {len(prompts)}, found "
                             f"{len(sampling_params)}")
        ids, results, by_id = [], {}, {}
        try:
            for prompt, params in zip(prompts, sampling_params):
                rid = self._add(prompt, params)
                ids.append(rid)
                by_id[rid] = params
                results[rid] = CompletionOutput(prompt_token_ids=self._ids(prompt),
                                                logprobs=None if params is None or
                                                params.logprobs is None else [])
            pending = list(ids)
            while pending:
                for out in self._step(pending[0]) + sum((self._take(r) for r in pending[1:]),
                                                        []):
                    self._merge(results[out["id"]], out, by_id[out["id"]])
                    if out["finished"]:
                        pending.remove(out["id"])
        except BaseException:
            for rid in ids:
                self._abort(rid)
            raise
        return [results[rid] for rid in ids]

    def chat(self, messages, sampling_params: Union[None, SamplingParams,
                                                    Sequence[SamplingParams]] = None,
             add_generation_prompt: bool = True, tools: Optional[list] = None,
             chat_template_kwargs: Optional[dict] = None) -> List[CompletionOutput]:
        """vLLM's LLM.chat: one conversation (a list of {"role", "content", ...} dicts) or a list of
        them, rendered by the checkpoint's chat template (tools and chat_template_kwargs, such as
        {"enable_thinking": False} for Qwen 3, reach the template), then generated as generate()
        does. Returns one CompletionOutput per conversation."""
        single = bool(messages) and isinstance(messages[0], dict)
        conversations = [messages] if single else list(messages)
        extra = dict(chat_template_kwargs or {})
        if tools is not None:
            extra["tools"] = tools
        prompts = [self._engine.chat_ids(json.dumps(c), add_generation_prompt,
                                         json.dumps(extra) if extra else "")
                   for c in conversations]
        return self.generate(prompts, sampling_params)

    def stream(self, prompt: Union[str, List[int]],
               sampling_params: Optional[SamplingParams] = None) -> Iterator[StreamDelta]:
        """Yields a StreamDelta each step that adds something to the request, the last one with its
        finish_reason. Closing the iterator early (break) aborts the request."""
        rid = self._add(prompt, sampling_params)
        finished = False
        try:
            while not finished:
                for out in self._step(rid):
                    if out["finish_reason"] == "error":
                        raise RuntimeError(out["stop_reason"])
                    finished = out["finished"]
                    yield StreamDelta(out["tokens"], out["text"], out["finish_reason"],
                                      self._logprobs(out, sampling_params))
        finally:
            if not finished:
                self._abort(rid)

    def _take(self, rid: int) -> list:
        with self._lock:
            return self._outputs.pop(rid, [])

    def _ids(self, prompt):
        return self._engine.encode(prompt) if isinstance(prompt, str) else list(prompt)

    @staticmethod
    def _logprobs(out: dict, params: Optional[SamplingParams]):
        if params is None or params.logprobs is None:
            return None
        steps = []
        for token, value, top in out["logprobs"]:
            d = {t: Logprob(v, rank) for rank, (t, v) in enumerate(top, start=1)}
            if token not in d:
                d[token] = Logprob(value)
            steps.append(d)
        return steps

    @staticmethod
    def _merge(result: CompletionOutput, out: dict, params: Optional[SamplingParams]) -> None:
        if out["finish_reason"] == "error":
            raise RuntimeError(out["stop_reason"])
        steps = LLM._logprobs(out, params)
        if steps is not None:
            result.logprobs = (result.logprobs or []) + steps
        result.token_ids += out["tokens"]
        result.text += out["text"]
        if out["ttft_s"] >= 0:
            result.ttft_s = out["ttft_s"]
        if out["finished"]:
            result.finish_reason = out["finish_reason"]
            result.stop_reason = out["stop_reason"]
