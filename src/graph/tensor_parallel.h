// Megatron-style tensor-parallel partition of a Llama 3 / Qwen 3 model over `tp` ranks:
// QKV and gate/up column-parallel (each rank a contiguous range of q heads, of the kv heads they
// read, and of the intermediate features), O and down row-parallel (the matching input columns;
// their outputs are partial sums that an all-reduce adds), the LM head vocab-parallel (each rank
// a contiguous row range; logits are gathered), everything else replicated. A rank's KV cache
// holds its kv heads only. Pure host code: the CPU oracle (reference/model.h) and the GPU
// executors share it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/model_config.h"

namespace megaops {

// What one rank holds, in units of the full model.
struct TpShape {
  int tp = 1, rank = 0;
  int head0 = 0, heads = 0;        // q heads [head0, head0 + heads)
  int kv_head0 = 0, kv_heads = 0;  // kv heads [kv_head0, kv_head0 + kv_heads)
  int inter0 = 0, inter = 0;       // intermediate features [inter0, inter0 + inter)
  int vocab0 = 0, vocab = 0;       // LM head rows [vocab0, vocab0 + vocab): blocks of
                                   // ceil(vocab_size / tp), so the last ranks may hold fewer
};

// Throws InputError (naming the field, expected vs found) unless 1 <= tp, 0 <= rank < tp, and tp
// divides num_kv_heads (so it divides num_heads: GQA groups stay on one rank) and
// intermediate_size, and tp <= vocab_size.
TpShape tp_shape(const ModelConfig& cfg, int tp, int rank);

// The configuration a rank computes with: its heads, kv heads and intermediate size; hidden size,
// head_dim, vocabulary and everything else as the model's.
ModelConfig tp_rank_config(const ModelConfig& cfg, const TpShape& s);

// How a rank's part of a weight is cut from the full [rows, cols] row-major tensor.
enum class TpSplit { Replicated, Rows, Cols };
struct TpSlice {
  TpSplit split = TpSplit::Replicated;
  int64_t begin = 0, end = 0;  // row or column range (Rows / Cols)
};

// The slice of weight `name` (an HF name of expected_weights(cfg)) that rank `s` holds.
// `as_lm_head` asks for the vocab-parallel cut of the embedding table (tied embeddings: the table
// is also the LM head; as the input embedding it stays replicated). Throws InputError on an unknown
// name.
TpSlice tp_slice(const ModelConfig& cfg, const TpShape& s, const std::string& name,
                 bool as_lm_head = false);

// Copies the slice out of `full` ([rows, cols] row-major).
std::vector<float> tp_cut(const std::vector<float>& full, int64_t rows, int64_t cols,
                          const TpSlice& slice);

}  // namespace megaops
