// The ModelRunner (engine/model_runner.h) of the fp32 CPU oracle: ref::Model over a paged KV cache
// (reference/model.h, forward_paged), every step's sequences in one forward pass, and sampling by
// ref::sample, the definition the GPU sampler shares. Slow (plain loops), exact, and the runner
// the engine, the server and their tests run on without a GPU.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "reference/model.h"

namespace megaops {

class Checkpoint;

struct CpuRunnerOptions {
  int max_context = 4096;   // positions per request (at most max_position_embeddings)
  int block_size = 16;      // positions per KV block
  int kv_blocks = 0;        // blocks in the pool; 0: max_decode_rows requests of max_context
  int max_decode_rows = 8;  // most requests in one step
  int max_step_tokens = 0;  // most rows in one step; 0: 2048 (at least max_decode_rows)
  int tp = 1;               // the oracle's tensor-parallel ranks (reference/model.h)
};

class CpuModelRunner final : public ModelRunner {
 public:
  // Converts the checkpoint's weights to fp32 (rejecting NaN / Inf, as ref::load_weights does).
  // Throws InputError naming the option on a value out of range.
  CpuModelRunner(const Checkpoint& ckpt, const CpuRunnerOptions& options);
  // Over weights already converted (shared with other runners or ref::Models).
  CpuModelRunner(std::shared_ptr<const ref::Weights> weights, const CpuRunnerOptions& options);

  const ModelConfig& config() const override { return weights_->cfg; }
  KvCacheGeometry kv_geometry() const override { return geometry_; }
  int max_decode_rows() const override { return options_.max_decode_rows; }
  int max_step_tokens() const override { return options_.max_step_tokens; }
  int max_context() const override { return options_.max_context; }
  std::vector<int> run(const std::vector<RunnerSeq>& seqs) override;
  std::vector<float> last_logits() const override { return last_logits_; }
  const char* backend() const override { return "cpu"; }
  bool shares_kv_blocks() const override { return true; }

 private:
  std::shared_ptr<const ref::Weights> weights_;
  CpuRunnerOptions options_;
  KvCacheGeometry geometry_;
  std::unique_ptr<ref::Model> model_;
  std::vector<float> last_logits_;
};

}  // namespace megaops
