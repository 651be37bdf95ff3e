// The executor behind the Executor interface (runtime/executor.h): one step graph over shared
// step resources (runtime/executor_core.h), with the decode step recorded by the backend the
// options pick: conventional (one kernel per op on one stream, barriers between them, optionally
// PDL; runtime/conventional_step.cu), the multi-stream tile overlap (runtime/overlap.cu,
// overlap_ops.cu), the PDL chain (runtime/pdl_chain.cu) and tensor parallelism (runtime/tp.cu).
// Decode steps are captured once per (batch size, PDL, backend) into a CUDA graph and replayed
// (runtime/graph_cache.cu); prefill runs eagerly in chunks. The conventional backend is the
// baseline every other one is measured against, and the one that must always work.
#pragma once

#include <memory>

#include "runtime/executor.h"

namespace megaops {

struct ExecutorCore;

class ConventionalExecutor final : public Executor {
 public:
  // Uploads all weights as bf16. `progress` (may be empty) gets (bytes done, bytes total).
  ConventionalExecutor(const ModelConfig& cfg, const WeightFiller& weights, ExecutorOptions opt,
                       const std::function<void(size_t, size_t)>& progress = {});
  ~ConventionalExecutor() override;
  ConventionalExecutor(const ConventionalExecutor&) = delete;
  ConventionalExecutor& operator=(const ConventionalExecutor&) = delete;

  const ModelConfig& config() const override;
  const ExecutorOptions& options() const override;
  std::vector<int> prefill(const std::vector<std::vector<int>>& prompts) override;
  std::vector<int> decode_step(const std::vector<int>* forced = nullptr) override;
  std::vector<int> decode_steps(
      int steps,
      const std::function<void(int step, const std::vector<int>& tokens)>& on_tokens) override;
  std::vector<float> last_logits() const override;
  // The same logits left on the GPU: [rows, vocab] fp32 at `data` on stream(), valid until the
  // next prefill or decode step (the Python module copies them device to device).
  struct DeviceLogits {
    const float* data = nullptr;
    int rows = 0;
  };
  DeviceLogits device_logits() const;
  std::vector<OpTime> profile_decode_steps(int steps) override;
  void set_pdl(bool pdl) override;
  void set_prefill_path(PrefillPath path) override;
  void set_prefill_attention(PrefillAttention attention) override;
  std::string take_prefill_attention_note() override;
  void set_backend(DecodeBackend backend) override;
  void set_overlap_delay(uint32_t max_ns, uint64_t seed) override;
  void set_overlap_regions(const std::vector<ExecutorOptions::OverlapRegion>& regions) override;
  std::vector<std::string> overlap_op_names() const override;
  std::vector<TraceEvent> take_overlap_trace(uint64_t* dropped) override;
  size_t weight_bytes() const override;
  size_t kv_bytes_read() const override;
  size_t kv_bytes_per_step() const override;
  cudaStream_t stream() const override;
  const std::string& device_name() const override;

 private:
  std::unique_ptr<ExecutorCore> impl_;
};

}  // namespace megaops
