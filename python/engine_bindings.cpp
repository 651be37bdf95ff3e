// See engine_bindings.h.
#include "engine_bindings.h"

#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <mutex>

#include "core/error.h"
#include "engine/cpu_runner.h"
#include "engine/gpu_runner.h"
#include "io/text_file.h"

namespace nb = nanobind;

namespace megaops::py {

RunnerConfig runner_config(const std::string& device, int max_context, int max_batch, int kv_blocks,
                           int block_size, int max_step_tokens, const std::string& plan_file,
                           const Checkpoint& ckpt, double gpu_memory_utilization) {
  if (device != "auto" && device != "cpu" && device != "cuda")
    throw InputError("device: expected auto, cpu or cuda, found '" + device + "'");
  if (device == "cuda" && !gpu_runner_available())
    throw InputError("device: cuda asked for, but this build or machine has no CUDA device");
  if (max_batch < 1 || max_batch > 64)
    throw InputError("max_batch: expected 1..64, found " + std::to_string(max_batch));
  if (kv_blocks < 0 || block_size < 1 || max_step_tokens < 0)
    throw InputError("kv_blocks, block_size, max_step_tokens: expected >= 0, >= 1, >= 0, found " +
                     std::to_string(kv_blocks) + ", " + std::to_string(block_size) + ", " +
                     std::to_string(max_step_tokens));
  if (max_context < 2)
    throw InputError("max_context: expected >= 2, found " + std::to_string(max_context));
  if (!(gpu_memory_utilization > 0 && gpu_memory_utilization <= 1))
    throw InputError("gpu_memory_utilization: expected a fraction in (0, 1], found " +
                     std::to_string(gpu_memory_utilization));
  RunnerConfig c;
  c.device = device;
  c.max_context = std::min(max_context, ckpt.config().max_position_embeddings);
  c.max_batch = max_batch;
  c.kv_blocks = kv_blocks;
  c.block_size = block_size;
  c.max_step_tokens = max_step_tokens;
  c.gpu_memory_utilization = gpu_memory_utilization;
  c.plan_from_file = !plan_file.empty();
  if (plan_file.empty()) {
    c.plan = default_plan(max_batch);
    c.plan_origin = c.plan.source;
  } else {
    c.plan = parse_plan(read_text_file(plan_file), plan_file);
    check_plan_runnable(c.plan, plan_file);
    c.plan_origin = plan_file;
  }
  return c;
}

std::unique_ptr<ModelRunner> make_runner(const Checkpoint& ckpt, const RunnerConfig& c,
                                         const SamplingParams& gpu_sampling, std::string* label) {
  if (c.device != "cpu" && gpu_runner_available()) {
    GpuRunnerOptions g;
    g.max_context = c.max_context;
    g.max_batch = c.max_batch;
    g.max_step_tokens = c.max_step_tokens;
    g.kv_block_size = c.block_size;
    g.kv_blocks = c.kv_blocks;
    g.gpu_memory_utilization = c.gpu_memory_utilization;
    g.sampling = gpu_sampling;
    if (c.plan_from_file) {
      // The bucket of the plan's batch runs it (one request at a time: the only bucket).
      g.plans = {c.plan};
      if (c.max_batch == 1) g.plans.front().batch = 1;
    }
    g.plan_origin = c.plan_origin;
    g.label = describe(c.plan);
    std::unique_ptr<ModelRunner> runner = make_gpu_runner(ckpt, g);
    *label = std::string("GPU, ") + runner->backend();
    return runner;
  }
  CpuRunnerOptions o;
  o.max_context = c.max_context;
  o.max_decode_rows = c.max_batch;
  o.kv_blocks = c.kv_blocks;
  o.block_size = c.block_size;
  o.max_step_tokens = c.max_step_tokens;
  *label = "CPU oracle, fp32";
  return std::make_unique<CpuModelRunner>(ckpt, o);
}

RequestParams request_params(const CheckpointText& text, int max_tokens, float temperature,
                             int top_k, float top_p, uint64_t seed,
                             const std::vector<std::string>& stop,
                             const std::vector<int>& stop_token_ids, bool ignore_eos,
                             int logprobs) {
  RequestParams p;
  p.logprobs = logprobs;
  p.sampling = resolve_sampling(text.generation(), temperature, top_k, top_p, seed);
  p.max_tokens = max_tokens;
  p.stop = stop;
  p.stop_token_ids = stop_token_ids;
  p.ignore_eos = ignore_eos;
  return p;
}

std::vector<int> prompt_ids(const CheckpointText& text, nb::handle prompt) {
  if (nb::isinstance<nb::str>(prompt))
    return text.tokenizer().encode(nb::cast<std::string>(prompt), true);
  return nb::cast<std::vector<int>>(prompt);
}

namespace {

nb::dict output_dict(const RequestOutput& o) {
  nb::dict d;
  d["id"] = o.id;
  d["tokens"] = o.new_tokens;
  d["text"] = o.text;
  d["finished"] = o.finished;
  d["finish_reason"] =
      o.finished ? nb::object(nb::str(finish_reason_name(o.finish_reason))) : nb::none();
  d["stop_reason"] = o.stop_reason;
  d["prompt_tokens"] = o.prompt_tokens;
  d["completion_tokens"] = o.completion_tokens;
  d["ttft_s"] = o.ttft_s;
  // Per new token: (its id, its logprob, [(id, logprob) of the top-N]); empty without logprobs.
  nb::list lps;
  for (const SampledLogprobs& t : o.logprobs) {
    nb::list top;
    for (const TokenLogprob& a : t.top) top.append(nb::make_tuple(a.token, a.logprob));
    lps.append(nb::make_tuple(t.sampled.token, t.sampled.logprob, top));
  }
  d["logprobs"] = lps;
  return d;
}

// The engine over one checkpoint. One lock serialises every call: the GIL is released while a
// step runs, so several Python threads may share one object.
class PyLLM {
 public:
  PyLLM(const std::string& path, const std::string& device, int max_context, int max_batch,
        int kv_blocks, int block_size, int max_step_tokens, const std::string& plan_file,
        double gpu_memory_utilization, bool enable_prefix_caching)
      : text_(CheckpointText::open(path)), ckpt_(Checkpoint::open(path)) {
    const RunnerConfig c = runner_config(device, max_context, max_batch, kv_blocks, block_size,
                                         max_step_tokens, plan_file, ckpt_, gpu_memory_utilization);
    EngineOptions eo;
    eo.eos_token_ids = text_.eos_token_ids();
    eo.prefix_caching = enable_prefix_caching;
    nb::gil_scoped_release release;
    engine_ = std::make_unique<Engine>(make_runner(ckpt_, c, {}, &backend_), &text_, eo);
  }

  uint64_t add_request(nb::handle prompt, int max_tokens, float temperature, int top_k, float top_p,
                       uint64_t seed, const std::vector<std::string>& stop,
                       const std::vector<int>& stop_token_ids, bool ignore_eos, int logprobs,
                       float presence_penalty, float frequency_penalty, float repetition_penalty,
                       const std::map<int, float>& logit_bias, int min_tokens, float min_p) {
    const std::vector<int> ids = prompt_ids(text_, prompt);
    RequestParams p = request_params(text_, max_tokens, temperature, top_k, top_p, seed, stop,
                                     stop_token_ids, ignore_eos, logprobs);
    p.presence_penalty = presence_penalty;
    p.frequency_penalty = frequency_penalty;
    p.repetition_penalty = repetition_penalty;
    p.logit_bias = logit_bias;
    p.min_tokens = min_tokens;
    p.min_p = min_p;
    std::lock_guard<std::mutex> lock(mutex_);
    return engine_->add_request(ids, p);
  }

  nb::list step() {
    std::vector<RequestOutput> outs;
    {
      nb::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mutex_);
      outs = engine_->step();
    }
    nb::list l;
    for (const RequestOutput& o : outs) l.append(output_dict(o));
    return l;
  }

  bool abort(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    return engine_->abort(id);
  }
  bool has_work() {
    std::lock_guard<std::mutex> lock(mutex_);
    return engine_->has_work();
  }

  nb::dict stats() {
    EngineStats s;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      s = engine_->stats();
    }
    nb::dict d;
    d["waiting"] = s.waiting;
    d["running"] = s.running;
    d["kv_blocks_used"] = s.kv_blocks_used;
    d["kv_blocks_free"] = s.kv_blocks_free;
    d["kv_blocks_total"] = s.kv_blocks_total;
    d["prompt_tokens_total"] = s.prompt_tokens_total;
    d["generation_tokens_total"] = s.generation_tokens_total;
    d["preemptions_total"] = s.preemptions_total;
    d["prefix_caching"] = s.prefix_caching;
    d["prefix_cache_queries_total"] = s.prefix_cache_queries_total;
    d["prefix_cache_hits_total"] = s.prefix_cache_hits_total;
    d["kv_blocks_cached"] = s.kv_blocks_cached;
    d["steps_total"] = s.steps_total;
    return d;
  }

  std::vector<int> encode(const std::string& s, bool add_special_tokens) const {
    return text_.tokenizer().encode(s, add_special_tokens);
  }
  // A conversation's prompt ids (JSON text in: Python's json module is the faithful bridge for
  // arbitrary message dicts), as the server's chat endpoint renders it.
  std::vector<int> chat_ids(const std::string& messages, bool add_generation_prompt,
                            const std::string& extra) const {
    const auto parse = [](const std::string& s, const char* name) {
      try {
        return nlohmann::ordered_json::parse(s);
      } catch (const nlohmann::json::exception& e) {
        throw InputError(std::string(name) + ": not JSON: " + e.what());
      }
    };
    const std::string text =
        text_.render_chat(parse(messages, "messages"), add_generation_prompt,
                          extra.empty() ? nlohmann::ordered_json(nullptr)
                                        : parse(extra, "tools / chat_template_kwargs"));
    return text_.tokenizer().encode(text, false);
  }
  const std::string& backend() const { return backend_; }

 private:
  CheckpointText text_;
  Checkpoint ckpt_;
  std::string backend_;
  std::mutex mutex_;
  std::unique_ptr<Engine> engine_;
};

}  // namespace

void bind_llm(nb::module_& m) {
  nb::class_<PyLLM>(m, "_LLM",
                    "The engine over one checkpoint (megaops.LLM wraps it): requests added, "
                    "stepped and aborted independently, continuously batched.")
      .def(nb::init<const std::string&, const std::string&, int, int, int, int, int,
                    const std::string&, double, bool>(),
           nb::arg("path"), nb::arg("device") = "auto", nb::arg("max_context") = 4096,
           nb::arg("max_batch") = 8, nb::arg("kv_blocks") = 0, nb::arg("block_size") = 16,
           nb::arg("max_step_tokens") = 0, nb::arg("plan") = "",
           nb::arg("gpu_memory_utilization") = 0.9, nb::arg("enable_prefix_caching") = true)
      .def("add_request", &PyLLM::add_request, nb::arg("prompt"), nb::arg("max_tokens") = 16,
           nb::arg("temperature") = -1.0f, nb::arg("top_k") = -1, nb::arg("top_p") = -1.0f,
           nb::arg("seed") = 0, nb::arg("stop") = std::vector<std::string>{},
           nb::arg("stop_token_ids") = std::vector<int>{}, nb::arg("ignore_eos") = false,
           nb::arg("logprobs") = -1, nb::arg("presence_penalty") = 0.0f,
           nb::arg("frequency_penalty") = 0.0f, nb::arg("repetition_penalty") = 1.0f,
           nb::arg("logit_bias") = std::map<int, float>{}, nb::arg("min_tokens") = 0,
           nb::arg("min_p") = 0.0f)
      .def("step", &PyLLM::step)
      .def("abort", &PyLLM::abort, nb::arg("id"))
      .def("has_work", &PyLLM::has_work)
      .def("stats", &PyLLM::stats)
      .def("encode", &PyLLM::encode, nb::arg("text"), nb::arg("add_special_tokens") = true)
      .def("chat_ids", &PyLLM::chat_ids, nb::arg("messages"), nb::arg("add_generation_prompt"),
           nb::arg("extra"))
      .def_prop_ro("backend", &PyLLM::backend);
}

}  // namespace megaops::py
