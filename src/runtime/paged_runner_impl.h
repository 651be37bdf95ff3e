// Private to the paged runner (paged_runner.cu: set-up, validation and the decode buckets;
// paged_runner_prefill.cu: the packed prompt pass): the runner class over the executor's step
// resources. See runtime/paged_runner.h for what it does.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "kernels/sampling.cuh"
#include "runtime/executor_core.h"
#include "runtime/paged_runner.h"

namespace megaops {

// Pinned host memory mapped into the device (the device reads it as is), freed on destruction.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  void allocate(size_t bytes);  // zeroed; once
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  uint8_t* get() const { return ptr_; }

 private:
  uint8_t* ptr_ = nullptr;
};

// How one bucket's decode step runs: its plan's backend and PDL setting, and the plan in words.
struct BucketRun {
  DecodeBackend backend = DecodeBackend::Conventional;
  bool pdl = false;
  std::string text;
};

// One row of a step through the decode buckets: position `pos` of seqs[seq] with its token; the
// row samples when it is the last row of a sampled seq.
struct BucketRow {
  size_t seq;
  int pos;
  int token;
  bool sample;
};

// Sequences a packed prompt pass takes at most (their block-table rows follow the decode rows').
constexpr int PAGED_PREFILL_SEQS_PER_PASS = 64;

class PagedRunner final : public ModelRunner {
 public:
  PagedRunner(const ModelConfig& cfg, const WeightFiller& weights, PagedRunnerOptions opt,
              const std::function<void(size_t, size_t)>& progress);
  ~PagedRunner() override;
  PagedRunner(const PagedRunner&) = delete;
  PagedRunner& operator=(const PagedRunner&) = delete;

  const ModelConfig& config() const override { return core_->full_cfg; }
  KvCacheGeometry kv_geometry() const override { return opt_.kv; }
  int max_decode_rows() const override { return opt_.max_decode_rows; }
  int max_step_tokens() const override { return opt_.max_step_tokens; }
  int max_context() const override { return opt_.max_context; }
  std::vector<int> run(const std::vector<RunnerSeq>& seqs) override;
  std::vector<float> last_logits() const override { return logits_; }
  const char* backend() const override { return backend_text_.c_str(); }
  bool shares_kv_blocks() const override { return true; }  // every kernel reads through tables

 private:
  // ---- set-up (paged_runner.cu) ----
  void check_options(const ModelConfig& cfg) const;
  // The executor's options: the plans' choices, the shapes, the cache and batch invariance.
  ExecutorOptions executor_options(const ModelConfig& cfg);
  void allocate_staging();

  // ---- one step ----
  void validate(const std::vector<RunnerSeq>& seqs) const;
  void validate_seq(const RunnerSeq& s, size_t i, std::unordered_set<int64_t>& written) const;
  // Fills table row `row` of the pinned staging with seq s's blocks (scratch past them).
  void stage_table_row(int row, const RunnerSeq& s);
  SampleRow sample_row(const RunnerSeq& s) const;

  // ---- the decode buckets (paged_runner.cu) ----
  void run_bucket_rows(const std::vector<RunnerSeq>& seqs, const std::vector<size_t>& which,
                       std::vector<int>& out);
  // Rows [r0, r1) of `rows` as one replay of the smallest bucket that holds them.
  void replay(const std::vector<RunnerSeq>& seqs, const std::vector<BucketRow>& rows, size_t r0,
              size_t r1, std::vector<int>& out);
  int bucket_for(int rows) const;
  cudaGraphExec_t graph_for_bucket(int bucket);
  // What a bucket's step enqueues on the executor's stream: the step inputs' copy, then the
  // step on the bucket's backend.
  void record_bucket(int bucket);

  // ---- the packed prompt pass (paged_runner_prefill.cu) ----
  void run_prefill(const std::vector<RunnerSeq>& seqs, const std::vector<size_t>& which,
                   std::vector<int>& out);
  void prefill_pass(const std::vector<RunnerSeq>& seqs, const std::vector<size_t>& which,
                    size_t begin, size_t end, std::vector<int>& out);
  // The LM head and sampler over sampled seqs' last rows (normed rows at `rows`), in groups of
  // max_decode_rows.
  void prefill_sample(const std::vector<RunnerSeq>& seqs, const std::vector<size_t>& sampled,
                      const std::vector<int>& rows, std::vector<int>& out);

  // Queues the copy of row r of the logits to the host as seq's, where it wants them
  // (RunnerSeq::want_logits); true when it did (the stream must be synchronised before reading).
  bool keep_logits_row(const RunnerSeq& s, size_t seq, int r);

  PagedRunnerOptions opt_;
  std::unique_ptr<ExecutorCore> core_;
  std::vector<int> buckets_;
  std::map<int, BucketRun> runs_;  // by bucket
  std::map<int, cudaGraphExec_t> graphs_;
  bool prefill_by_buckets_ = false;
  std::string backend_text_;
  int stride_ = 0;         // block-table entries a row
  int32_t scratch_ = 0;    // the scratch block (padding rows write there)
  size_t head_bytes_ = 0;  // the step inputs before the block table
  // Pinned staging: the step inputs region as the device holds it (the copy at the head of a
  // bucket's step reads it), the prompt pass's token ids / positions / table rows, its sampled
  // rows' parameters and tokens.
  PinnedBuffer inputs_;
  PinnedBuffer prompt_;
  PinnedBuffer prompt_sample_;
  PinnedBuffer prompt_tokens_;
  SampleRow* dev_prompt_sample_ = nullptr;  // device [max_decode_rows]
  int32_t* dev_prompt_tokens_ = nullptr;    // device [max_decode_rows]
  std::vector<float> logits_;
  std::map<size_t, std::vector<float>> kept_;  // want_logits: sampled seq -> its logits row
};

}  // namespace megaops
