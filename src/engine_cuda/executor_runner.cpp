// The GPU runner factory of the CUDA build (engine/gpu_runner.h), over today's step executor
// (runtime/executor.h): an adapter that implements ModelRunner for one request at a time, until
// the paged GPU runner replaces it behind the same factory.
//
// What the adapter can do: a request's whole prompt in one step (the executor's prefill), then
// one decode row a step (the executor's captured decode graph), with the executor's plan,
// backends, tensor parallelism and sampler; requests with other sampling parameters than the
// executor was built with are sampled on the host from the step's logits (ref::sample, the
// definition the GPU sampler shares, with the request's own counter).
// What it cannot do (it says so as an Error naming the step, which fails the step's requests):
// run two requests in one step (max_decode_rows() is 1, so the engine queues the others), split a
// prompt into chunks (max_step_tokens() is the context), or address KV blocks: the executor keeps
// one contiguous cache for its batch slot (GpuRunnerOptions::max_batch is not used), so the block
// tables are accepted and ignored, and a request's cache is rebuilt by its prefill.
#include <cuda_runtime.h>

#include <algorithm>

#include "core/error.h"
#include "engine/gpu_runner.h"
#include "models/checkpoint.h"
#include "models/step_graph.h"
#include "reference/ops.h"
#include "runtime/executor.h"
#include "runtime/executor_options.h"
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
  ExecutorRunner(const Checkpoint& ckpt, const GpuRunnerOptions& o)
      : max_context_(o.max_context), label_("cuda:" + o.label) {
    if (o.max_context < 1 || o.max_context > ckpt.config().max_position_embeddings)
      throw InputError("max_context: expected 1.." +
                       std::to_string(ckpt.config().max_position_embeddings) + ", found " +
                       std::to_string(o.max_context));
    ExecutorOptions eo;
    eo.step_graph = build_step_graph;
    eo.max_batch = 1;
    eo.max_seq = o.max_context;
    eo.sampling = o.sampling;
    if (o.plan) apply_plan(*o.plan, eo);
    if (o.configure) o.configure(eo);
    sampling_ = eo.sampling;
    ex_ = make_executor(ckpt.config(), checkpoint_filler(ckpt), eo, o.progress);
    if (o.plan) set_plan_regions(*o.plan, o.plan_origin, *ex_);
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
  std::vector<float> last_logits() const override { return ex_->last_logits(); }

  std::vector<int> run(const std::vector<RunnerSeq>& seqs) override {
    if (seqs.size() != 1)
      throw Error("the GPU executor adapter runs one request a step, found " +
                  std::to_string(seqs.size()) + " (the paged GPU runner batches requests)");
    const RunnerSeq& s = seqs[0];
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
      // The executor feeds back what it sampled; a token sampled here is fed in its place.
      const std::vector<int> forced = s.tokens;
      token = ex_->decode_step(s.tokens[0] == last_ ? nullptr : &forced)[0];
    }
    pos_ = s.start_pos + static_cast<int>(s.tokens.size());
    if (!same_sampling(s.sampling, sampling_)) {
      // Only here are the logits copied to the host (a vocabulary of floats a step).
      const std::vector<float> logits = ex_->last_logits();
      const int vocab = ex_->config().vocab_size;
      token = ref::sample(
          logits.data(), vocab, s.sampling,
          ref::sampling_uniform(s.sampling.seed, 0, static_cast<uint32_t>(s.sample_index)));
    }
    last_ = token;
    return {token};
  }

 private:
  int max_context_;
  std::string label_;
  SamplingParams sampling_;
  KvCacheGeometry geometry_;
  std::unique_ptr<Executor> ex_;
  uint64_t request_ = 0;
  int pos_ = 0, last_ = -1;
};

}  // namespace

bool gpu_runner_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::unique_ptr<ModelRunner> make_gpu_runner(const Checkpoint& ckpt, const GpuRunnerOptions& o) {
  if (!gpu_runner_available()) throw Error("the GPU runner: no CUDA device is visible");
  return std::make_unique<ExecutorRunner>(ckpt, o);
}

}  // namespace megaops
