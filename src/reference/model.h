// fp32 CPU forward pass of a whole Llama 3 / Qwen 3 model with a KV cache: the oracle for
// full-model tests and the backend the engine runs on without a GPU (engine/cpu_runner.h). The
// cache is one growing block per model (forward: one sequence), or a pool of fixed-size blocks
// that several sequences address through block tables (forward_paged: the serving engine's paged
// KV cache). Both run the same arithmetic, row for row: a sequence's logits do not depend on the
// layout, the chunking of its prompt or the other sequences of a step.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/model_config.h"
#include "graph/op_graph.h"

namespace megaops {
class Checkpoint;
}

namespace megaops::ref {

// One op of a forward pass as the oracle ran it, in the step graph's terms (graph/op_graph.h):
// its code, layer (-1 outside the layers) and output [rows, cols] (at tp > 1, rank 0's part of a
// sharded output; the all-reduce's output is the summed residual stream). `out` is null where the
// op's output is not one buffer of the oracle: the fused projections, which it computes as
// separate matmuls (q, k, v; gate, up), and RoPE, which writes q and the new cache rows.
struct OpRecord {
  OpCode code;
  int layer;
  int64_t rows, cols;
  const float* out;
};
using OpObserver = std::function<void(const OpRecord&)>;

// All weights of a model as fp32, by HF name.
struct Weights {
  ModelConfig cfg;
  std::unordered_map<std::string, std::vector<float>> tensors;

  // Throws InputError naming the tensor if absent.
  const std::vector<float>& get(const std::string& name) const;
};

// Converts every expected weight of a checkpoint to fp32.
Weights load_weights(const Checkpoint& ckpt);

// The paged cache's shape: num_blocks blocks of block_size positions, per layer and rank.
struct PagedKvShape {
  int block_size = 16;
  int num_blocks = 0;
};

// One sequence's rows of a paged step: `tokens` at positions [start_pos, start_pos + size), their
// K/V written at block_table[pos / block_size] slot pos % block_size, attention reading positions
// [0, pos] through the same table.
struct PagedSeq {
  std::vector<int> tokens;
  int start_pos = 0;
  std::vector<int32_t> block_table;
};

// One sequence's state: its KV cache and position. Several Models may share one Weights.
//
// With tp > 1 the forward runs as `tp` tensor-parallel ranks (graph/tensor_parallel.h), each on
// its shard of the weights and its kv heads' cache, the row-parallel partial outputs added (the
// all-reduce, in rank order) and the vocab-parallel logits gathered: the CPU oracle of the TP
// executors (issue 6). tp = 1 is the plain model. Throws InputError when tp does not divide the
// model (tp_shape).
class Model {
 public:
  Model(const Weights& weights, int max_seq_len, int tp = 1);
  // A model over a paged cache of `paged` blocks (allocated up front, touched as written), for
  // forward_paged; max_seq_len bounds every sequence's positions.
  Model(const Weights& weights, int max_seq_len, const PagedKvShape& paged, int tp = 1);

  // Runs tokens at positions [pos(), pos() + n), appending to the KV cache. Returns logits
  // [n, vocab_size], row-major. Throws InputError on ids outside the vocabulary or on running past
  // max_seq_len.
  std::vector<float> forward(const std::vector<int>& tokens);

  // Runs every sequence's rows in one step over the paged cache and returns the logits of each
  // sequence's last row, [seqs.size(), vocab_size]. Throws InputError naming the sequence and
  // field (seqs[i].block_table[j], tokens, start_pos) on ids outside the vocabulary, positions
  // past max_seq_len, a table too short or a block outside the pool; nothing is written then.
  // Only for a model built with a PagedKvShape (Error otherwise, and forward() is refused there).
  std::vector<float> forward_paged(const std::vector<PagedSeq>& seqs);

  // Called after every op of later forward passes, in order (tests check the oracle's op list
  // against the step graph's, op by op). Attention is recorded as DecodeAttention for one token
  // after a cached context (a decode step) and as PrefillAttention otherwise; the sampler and
  // step_advance are not part of a forward pass.
  void set_observer(OpObserver observer) { observer_ = std::move(observer); }

  int pos() const { return pos_; }
  int tp() const { return static_cast<int>(ranks_.size()); }
  void reset() { pos_ = 0; }

 private:
  // One tensor-parallel rank: its configuration (heads, kv heads, intermediate size), its LM head
  // rows, the shards it owns (empty at tp = 1: the full weights are used) and its KV cache, per
  // layer [pos, kv heads of the rank, head_dim], grown as the context grows (a real checkpoint on
  // the CPU fallback must not allocate max_seq_len up front).
  // Paged: k_cache / v_cache are unused and k_pool / v_pool hold, per layer, [num_blocks *
  // block_size, kv heads of the rank, head_dim].
  struct Rank {
    ModelConfig cfg;
    int vocab0 = 0, vocab = 0;
    std::unordered_map<std::string, std::vector<float>> shards;
    std::vector<std::vector<float>> k_cache, v_cache;
    std::vector<std::unique_ptr<float[]>> k_pool, v_pool;
  };
  // The rows of one step: token ids, each row's position, and the sequences they belong to (one
  // contiguous run of rows each; `head_rows` are the rows the LM head runs on).
  struct Step {
    std::vector<int32_t> ids;
    std::vector<int> pos;
    std::vector<int> seq_row0, seq_rows;  // per sequence: first row and row count
    std::vector<int> head_rows;
    const std::vector<PagedSeq>* paged = nullptr;  // null: the one contiguous cache
  };
  const float* weight(const Rank& r, const std::string& name) const;
  std::vector<float> run(const Step& step);
  std::vector<float> lm_head(const Step& step, const std::vector<float>& h) const;
  // Writes the step's K/V rows of rank r, layer l into its cache and computes attention for every
  // row: attn[row] over positions [0, pos[row]] of the row's sequence.
  void attend(Rank& r, int l, const Step& step, const float* q, const float* k, const float* v,
              float* attn);
  void check_paged(const std::vector<PagedSeq>& seqs) const;

  const Weights& w_;
  int max_seq_len_;
  PagedKvShape paged_;  // num_blocks 0: the contiguous cache
  int pos_ = 0;
  std::vector<float> inv_freq_;
  std::vector<Rank> ranks_;
  OpObserver observer_;
};

}  // namespace megaops::ref
