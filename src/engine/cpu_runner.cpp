// See cpu_runner.h.
#include "engine/cpu_runner.h"

#include <algorithm>
#include <limits>
#include <unordered_set>

#include "core/error.h"
#include "models/checkpoint.h"
#include "reference/ops.h"

namespace megaops {

namespace {

void check_positive(const char* name, int value) {
  if (value < 1)
    throw InputError(std::string(name) + ": expected >= 1, found " + std::to_string(value));
}

}  // namespace

CpuModelRunner::CpuModelRunner(const Checkpoint& ckpt, const CpuRunnerOptions& options)
    : CpuModelRunner(std::make_shared<const ref::Weights>(ref::load_weights(ckpt)), options) {}

CpuModelRunner::CpuModelRunner(std::shared_ptr<const ref::Weights> weights,
                               const CpuRunnerOptions& options)
    : weights_(std::move(weights)), options_(options) {
  check_positive("max_context", options_.max_context);
  check_positive("block_size", options_.block_size);
  check_positive("max_decode_rows", options_.max_decode_rows);
  if (options_.max_context > weights_->cfg.max_position_embeddings)
    throw InputError("max_context: expected <= max_position_embeddings " +
                     std::to_string(weights_->cfg.max_position_embeddings) + ", found " +
                     std::to_string(options_.max_context));
  if (options_.max_step_tokens == 0)
    options_.max_step_tokens = std::max(2048, options_.max_decode_rows);
  check_positive("max_step_tokens", options_.max_step_tokens);
  if (options_.kv_blocks == 0) {
    const int64_t per_request = (options_.max_context + options_.block_size - 1) /
                                static_cast<int64_t>(options_.block_size);
    options_.kv_blocks = static_cast<int>(std::min<int64_t>(per_request * options_.max_decode_rows,
                                                            std::numeric_limits<int32_t>::max()));
  }
  check_positive("kv_blocks", options_.kv_blocks);
  geometry_ = {options_.block_size, options_.kv_blocks};
  model_ = std::make_unique<ref::Model>(
      *weights_, options_.max_context,
      ref::PagedKvShape{geometry_.block_size, geometry_.num_blocks}, options_.tp);
}

std::vector<int> CpuModelRunner::run(const std::vector<RunnerSeq>& seqs) {
  // The step's own checks (the oracle checks ids, positions and tables itself).
  size_t rows = 0;
  int decode_rows = 0;
  std::unordered_set<uint64_t> ids;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const RunnerSeq& s = seqs[i];
    const std::string at = "seqs[" + std::to_string(i) + "]";
    if (!ids.insert(s.request_id).second)
      throw InputError(at + ".request_id: " + std::to_string(s.request_id) +
                       " appears twice in one step");
    if (s.sample_index < 0)
      throw InputError(at + ".sample_index: expected >= 0, found " +
                       std::to_string(s.sample_index));
    rows += s.tokens.size();
    decode_rows += s.tokens.size() == 1 && s.start_pos > 0;
  }
  if (rows > static_cast<size_t>(options_.max_step_tokens))
    throw InputError("seqs: " + std::to_string(rows) + " rows in one step, expected at most " +
                     std::to_string(options_.max_step_tokens));
  if (decode_rows > options_.max_decode_rows)
    throw InputError("seqs: " + std::to_string(decode_rows) +
                     " decode rows in one step, expected at most " +
                     std::to_string(options_.max_decode_rows));
  std::vector<ref::PagedSeq> paged(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i)
    paged[i] = {seqs[i].tokens, seqs[i].start_pos, seqs[i].block_table};
  const std::vector<float> logits = model_->forward_paged(paged);
  const int vocab = weights_->cfg.vocab_size;
  std::vector<int> out(seqs.size(), -1);
  last_logits_.clear();
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (!seqs[i].sample) continue;
    const float* row = logits.data() + i * static_cast<size_t>(vocab);
    const SamplingParams& sp = seqs[i].sampling;
    out[i] =
        ref::sample(row, vocab, sp,
                    ref::sampling_uniform(sp.seed, 0, static_cast<uint32_t>(seqs[i].sample_index)));
    if (seqs[i].want_logits) last_logits_.insert(last_logits_.end(), row, row + vocab);
  }
  return out;
}

}  // namespace megaops
