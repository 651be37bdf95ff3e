// The GPU runner factory of the CUDA build (engine/gpu_runner.h): the paged runner
// (runtime/paged_runner.h) from the options, or, where it cannot run (tensor parallelism, a plan
// with a persistent region), an adapter over the step executor (runtime/executor.h) that
// implements ModelRunner for one request at a time.
//
// What the adapter can do: a request's whole prompt in one step (the executor's prefill), then
// one decode row a step (the executor's captured decode graph), with the executor's plan,
// backends, tensor parallelism and sampler; requests with other sampling parameters than the
// executor was built with are sampled on the host from the step's logits (ref::sample, the
// definition the GPU sampler shares, with the request's own counter).
// What it cannot do (it says so as an Error naming the step, which fails the step's requests):
// run two requests in one step (max_decode_rows() is 1, so the engine queues the others), split a
// prompt into chunks (max_step_tokens() is the context), or address KV blocks: the executor keeps
// one contiguous cache for its batch slot (GpuRunnerOptions::max_batch and the KV options are not
// used), so the block tables are accepted and ignored, and a request's cache is rebuilt by its
// prefill.
#include <cuda_runtime.h>

#include <algorithm>

#include "core/error.h"
#include "engine/gpu_runner.h"
#include "models/checkpoint.h"
#include "models/step_graph.h"
#include "reference/ops.h"
#include "runtime/executor.h"
#include "runtime/executor_options.h"
#include "runtime/paged_runner.h"
#include "runtime/plan_options.h"

namespace megaops {

namespace {

bool same_sampling(const SamplingParams& a, const SamplingParams& b) {
  // Greedy draws nothing: any two greedy settings sample alike.
  if (a.temperature <= 0 && b.temperature <= 0) return true;
  return a.temperature == b.temperature && a.top_k == b.top_k && a.top_p == b.top_p &&
         a.seed == b.seed;
}

class ExecutorRunner final : public ModelRunner {
 public:
  // `eo`: the options `configure` made; the first plan is applied over them.
  ExecutorRunner(const Checkpoint& ckpt, const GpuRunnerOptions& o, ExecutorOptions eo,
                 const std::string& why)
      : max_context_(o.max_context),
        label_("cuda:" + o.label + " (executor adapter: " + why + ")") {
    if (o.max_context < 1 || o.max_context > ckpt.config().max_position_embeddings)
      throw InputError("max_context: expected 1.." +
                       std::to_string(ckpt.config().max_position_embeddings) + ", found " +
                       std::to_string(o.max_context));
    const Plan* plan = o.plans.empty() ? nullptr : &o.plans.front();
    if (plan) apply_plan(*plan, eo);
    sampling_ = eo.sampling;
    ex_ = make_executor(ckpt.config(), checkpoint_filler(ckpt), eo, o.progress);
    if (plan) set_plan_regions(*plan, o.plan_origin, *ex_);
    if (o.configure_built) o.configure_built(*ex_);
    // One request's worth of blocks: the engine admits what one context holds.
    geometry_ = {16, (o.max_context + 15) / 16};
  }

  const ModelConfig& config() const override { return ex_->config(); }
  KvCacheGeometry kv_geometry() const override { return geometry_; }
  int max_decode_rows() const override { return 1; }
  int max_step_tokens() const override { return max_context_; }
  int max_context() const override { return max_context_; }
  const char* backend() const override { return label_.c_str(); }
  // The executor keeps its step's logits on the device (the greedy argmax epilogue writes them
  // too); run() copies them to the host only for a step that samples here or whose seq asked
  // (want_logits), once for both.
  std::vector<float> last_logits() const override {
    return want_logits_ ? logits_ : std::vector<float>{};
  }

  std::vector<int> run(const std::vector<RunnerSeq>& seqs) override {
    if (seqs.size() != 1)
      throw Error("the GPU executor adapter runs one request a step, found " +
                  std::to_string(seqs.size()) + " (the paged GPU runner batches requests)");
    const RunnerSeq& s = seqs[0];
    want_logits_ = false;
    logits_.clear();
    if (!s.sample)
      throw Error("the GPU executor adapter runs a prompt in one step, found a chunk of " +
                  std::to_string(s.tokens.size()) + " at position " + std::to_string(s.start_pos));
    int token = -1;
    if (s.start_pos == 0) {
      token = ex_->prefill({s.tokens})[0];
      request_ = s.request_id;
    } else {
      if (s.request_id != request_ || s.start_pos != pos_ || s.tokens.size() != 1)
        throw Error(
            "the GPU executor adapter continues only the request it prefilled last: "
            "found request " +
            std::to_string(s.request_id) + " at position " + std::to_string(s.start_pos) +
            " with " + std::to_string(s.tokens.size()) + " tokens");
      // The executor feeds back what its own sampler drew; any other token (one sampled here on
      // the host) is fed in its place.
      const std::vector<int> forced = s.tokens;
      token = ex_->decode_step(s.tokens[0] == executor_drew_ ? nullptr : &forced)[0];
    }
    executor_drew_ = token;
    pos_ = s.start_pos + static_cast<int>(s.tokens.size());
    const bool host_sampled = !same_sampling(s.sampling, sampling_);
    // Only here are the logits copied to the host (a vocabulary of floats a step).
    if (host_sampled || s.want_logits) logits_ = ex_->last_logits();
    if (host_sampled)
      token = ref::sample(
          logits_.data(), ex_->config().vocab_size, s.sampling,
          ref::sampling_uniform(s.sampling.seed, 0, static_cast<uint32_t>(s.sample_index)));
    want_logits_ = s.want_logits;
    return {token};
  }

 private:
  int max_context_;
  std::string label_;
  SamplingParams sampling_;
  KvCacheGeometry geometry_;
  std::unique_ptr<Executor> ex_;
  uint64_t request_ = 0;
  int pos_ = 0, executor_drew_ = -1;  // what the executor sampled last (its feedback)
  bool want_logits_ = false;          // the last step's seq asked for its logits
  std::vector<float> logits_;         // the last step's logits, where run() copied them
};

// Why the paged runner cannot run these options ("" where it can).
std::string adapter_reason(const ExecutorOptions& eo, const std::vector<Plan>& plans) {
  if (eo.tp > 1 || eo.tp_comm != nullptr)
    return "tensor parallelism; the paged cache does not run with it yet";
  for (const Plan& p : plans)
    for (const PlanRegion& r : p.decode.regions)
      if (r.backend == RegionBackend::Persistent)
        return "the plan has a persistent region; the paged runner runs none yet";
  return "";
}

std::unique_ptr<ModelRunner> make_paged(const Checkpoint& ckpt, const GpuRunnerOptions& o,
                                        const ExecutorOptions& eo) {
  PagedRunnerOptions ro;
  ro.executor = eo;
  // Rows carry their requests' own sampling parameters; greedy here only lets greedy rows take
  // the LM head's argmax epilogue (ExecutorOptions::greedy_in_lm_head).
  ro.executor.sampling = SamplingParams{0.0f, 0, 1.0f, 0};
  ro.max_context = o.max_context;
  ro.max_decode_rows = o.max_batch;
  ro.kv.block_size = o.kv_block_size;
  ro.kv.num_blocks = o.kv_blocks;
  ro.executor.kv_memory_utilization = o.gpu_memory_utilization;
  // The engine runs at most max_batch requests of at most max_context positions: more blocks
  // than they can hold would never be used.
  if (o.kv_block_size > 0 && o.max_context > 0 && o.max_batch > 0) {
    const int64_t most =
        static_cast<int64_t>(o.max_batch) *
        ((static_cast<int64_t>(o.max_context) + o.kv_block_size - 1) / o.kv_block_size);
    ro.executor.kv_max_blocks = static_cast<int>(std::min<int64_t>(most, 1 << 30));
  }
  int tokens = o.max_step_tokens;
  if (tokens == 0) {
    tokens = !o.plans.empty() && o.plans.front().prefill.chunk > 0 ? o.plans.front().prefill.chunk
                                                                   : 2048;
    const int64_t most =
        static_cast<int64_t>(std::max(o.max_batch, 1)) * std::max(o.max_context, 1);
    tokens = static_cast<int>(
        std::clamp<int64_t>(tokens, std::max(o.max_batch, 1), std::max<int64_t>(most, 1)));
  }
  ro.max_step_tokens = tokens;
  ro.plans = o.plans;
  try {
    return make_paged_runner(ckpt.config(), checkpoint_filler(ckpt), std::move(ro), o.progress);
  } catch (const InputError& e) {
    // A plan's own field: say which file it came from.
    const std::string what = e.what();
    if (!o.plan_origin.empty() && what.find("plans") != std::string::npos)
      throw InputError(o.plan_origin + ": " + what);
    throw;
  }
}

// The options `configure` makes of the adapter's defaults.
ExecutorOptions configured(const GpuRunnerOptions& o) {
  if (!gpu_runner_available()) throw Error("the GPU runner: no CUDA device is visible");
  ExecutorOptions eo;
  eo.step_graph = build_step_graph;
  eo.max_batch = 1;
  eo.max_seq = o.max_context;
  eo.sampling = o.sampling;
  if (o.configure) o.configure(eo);
  return eo;
}

}  // namespace

bool gpu_runner_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::unique_ptr<ModelRunner> make_gpu_runner(const Checkpoint& ckpt, const GpuRunnerOptions& o) {
  const ExecutorOptions eo = configured(o);
  const std::string why = adapter_reason(eo, o.plans);
  if (!why.empty()) return std::make_unique<ExecutorRunner>(ckpt, o, eo, why);
  return make_paged(ckpt, o, eo);
}

std::unique_ptr<ModelRunner> make_gpu_executor_adapter(const Checkpoint& ckpt,
                                                       const GpuRunnerOptions& o) {
  return std::make_unique<ExecutorRunner>(ckpt, o, configured(o), "asked for");
}

bool is_executor_adapter(const ModelRunner& r) {
  return dynamic_cast<const ExecutorRunner*>(&r) != nullptr;
}

std::string gpu_device_name() {
  int device = 0;
  cudaDeviceProp prop{};
  if (!gpu_runner_available() || cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(&prop, device) != cudaSuccess)
    return "";
  return prop.name;
}

}  // namespace megaops
