// fp32 CPU forward pass of a whole Llama 3 / Qwen 3 model with a KV cache: the oracle for
// full-model tests and the backend `megaops generate` falls back to without a GPU.
#pragma once

#include <functional>
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

  // Runs tokens at positions [pos(), pos() + n), appending to the KV cache. Returns logits
  // [n, vocab_size], row-major. Throws InputError on ids outside the vocabulary or on running past
  // max_seq_len.
  std::vector<float> forward(const std::vector<int>& tokens);

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
  struct Rank {
    ModelConfig cfg;
    int vocab0 = 0, vocab = 0;
    std::unordered_map<std::string, std::vector<float>> shards;
    std::vector<std::vector<float>> k_cache, v_cache;
  };
  const float* weight(const Rank& r, const std::string& name) const;

  const Weights& w_;
  int max_seq_len_;
  int pos_ = 0;
  std::vector<float> inv_freq_;
  std::vector<Rank> ranks_;
  OpObserver observer_;
};

}  // namespace megaops::ref
