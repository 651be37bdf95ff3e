// The paged runner's packed prompt pass (runtime/paged_runner.h, PrefillPath::Layers): the chunks
// of up to PAGED_PREFILL_SEQS_PER_PASS requests as one pass of the prefill step graph (its ops up
// to the final norm: cuBLASLt GEMMs over all the rows, qkv_rope writing each row's K / V into its
// request's blocks, the flash prefill attention reading them through the block table, one run of
// rows per request), then the LM head and the sampler over the last rows of the requests that
// sample, each with its own parameters and stream.
#include <algorithm>

#include "runtime/paged_runner_impl.h"

namespace megaops {

void PagedRunner::run_prefill(const std::vector<RunnerSeq>& seqs, const std::vector<size_t>& which,
                              std::vector<int>& out) {
  for (size_t b = 0; b < which.size(); b += PAGED_PREFILL_SEQS_PER_PASS)
    prefill_pass(seqs, which, b, std::min(which.size(), b + PAGED_PREFILL_SEQS_PER_PASS), out);
}

void PagedRunner::prefill_pass(const std::vector<RunnerSeq>& seqs, const std::vector<size_t>& which,
                               size_t begin, size_t end, std::vector<int>& out) {
  ExecutorCore& c = *core_;
  const int T_max = opt_.max_step_tokens;
  int32_t* ids = reinterpret_cast<int32_t*>(prompt_.get());
  int32_t* pos = ids + T_max;
  int32_t* slot = pos + T_max;
  // Table rows past the decode rows': the pass's j-th seq reads row max_decode_rows + j.
  const int row0 = opt_.max_decode_rows;
  std::vector<size_t> sampled;  // seqs that sample, and the pass row of their last token
  std::vector<int> last_rows;
  int t = 0;
  for (size_t k = begin; k < end; ++k) {
    const RunnerSeq& s = seqs[which[k]];
    const int row = row0 + static_cast<int>(k - begin);
    stage_table_row(row, s);
    for (size_t i = 0; i < s.tokens.size(); ++i, ++t) {
      ids[t] = s.tokens[i];
      pos[t] = s.start_pos + static_cast<int>(i);
      slot[t] = row;
    }
    if (s.sample) {
      sampled.push_back(which[k]);
      last_rows.push_back(t - 1);
    }
  }
  const cudaStream_t st = c.stream;
  const size_t n = static_cast<size_t>(t) * sizeof(int32_t);
  MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(c.tok_ids, ids, n, cudaMemcpyHostToDevice, st));
  MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(c.tok_pos, pos, n, cudaMemcpyHostToDevice, st));
  MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(c.tok_slot, slot, n, cudaMemcpyHostToDevice, st));
  const size_t table_at = static_cast<size_t>(row0) * stride_;
  MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(
      c.kv_table + table_at, reinterpret_cast<int32_t*>(inputs_.get() + head_bytes_) + table_at,
      (end - begin) * static_cast<size_t>(stride_) * sizeof(int32_t), cudaMemcpyHostToDevice, st));
  // The prefill graph's ops up to and including the final norm (normed: every row's last hidden
  // state); the LM head and the sampler run on the sampled rows only.
  const OpGraph& g = c.prefill_graph;
  size_t head = 0;
  while (head < g.ops.size() && g.ops[head].code != OpCode::FinalNorm) ++head;
  if (head == g.ops.size()) throw Error("internal: the prefill step graph has no final norm");
  ++head;
  StepWalk w;
  w.rows = t;
  w.ids = c.tok_ids;
  w.pos = c.tok_pos;
  w.slots = c.tok_slot;
  c.run_ops(g, 0, head, w);
  if (!sampled.empty()) prefill_sample(seqs, sampled, last_rows, out);
  // The staging above is reused by the next pass.
  c.check_step(cudaStreamSynchronize(st));
}

void PagedRunner::prefill_sample(const std::vector<RunnerSeq>& seqs,
                                 const std::vector<size_t>& sampled, const std::vector<int>& rows,
                                 std::vector<int>& out) {
  ExecutorCore& c = *core_;
  const cudaStream_t st = c.stream;
  const size_t h = static_cast<size_t>(c.cfg.hidden_size);
  SampleRow* host_rows = reinterpret_cast<SampleRow*>(prompt_sample_.get());
  int32_t* host_tokens = reinterpret_cast<int32_t*>(prompt_tokens_.get());
  const size_t group = static_cast<size_t>(opt_.max_decode_rows);  // lm_in and logits rows
  for (size_t g0 = 0; g0 < sampled.size(); g0 += group) {
    const size_t g1 = std::min(sampled.size(), g0 + group);
    const int b = static_cast<int>(g1 - g0);
    for (size_t k = g0; k < g1; ++k) {
      MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(c.lm_in + (k - g0) * h,
                                         c.normed + static_cast<size_t>(rows[k]) * h,
                                         h * sizeof(bf16), cudaMemcpyDeviceToDevice, st));
      host_rows[k] = sample_row(seqs[sampled[k]]);
    }
    MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(dev_prompt_sample_, host_rows + g0, b * sizeof(SampleRow),
                                       cudaMemcpyHostToDevice, st));
    SampleParams sp;
    sp.argmax = c.lm_head_logits(c.lm_in, b, /*pdl=*/false);
    sp.logits = c.logits;
    sp.ld = c.cfg.vocab_size;
    sp.b = b;
    sp.vocab = c.cfg.vocab_size;
    sp.rows = dev_prompt_sample_;
    sp.tokens = dev_prompt_tokens_;
    sp.launch = c.launch(false);
    c.check(launch_sample(sp), "sample");
    MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(host_tokens + g0, dev_prompt_tokens_, b * sizeof(int32_t),
                                       cudaMemcpyDeviceToHost, st));
    for (size_t k = g0; k < g1; ++k)
      keep_logits_row(seqs[sampled[k]], sampled[k], static_cast<int>(k - g0));
    // The next group overwrites lm_in, the logits and the device rows: stream order keeps them.
  }
  c.check_step(cudaStreamSynchronize(st));
  for (size_t k = 0; k < sampled.size(); ++k) out[sampled[k]] = host_tokens[k];
}

}  // namespace megaops
