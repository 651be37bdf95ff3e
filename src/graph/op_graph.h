// The op graph of one decode step (or one prefill chunk) of a dense decoder, built from a
// ModelConfig: the ops the conventional executor launches, in launch order, with their shapes,
// bytes, FLOPs and tiling contracts. The planner reads it as plain data; nothing here runs a
// kernel.
//
// Tiling contract: an op's output is a [rows, cols] tensor cut into tiles of `tile_rows` rows x
// `tile_cols` columns (decode: one row block holding every batch row, so a tile is a block of
// output columns for all sequences). For each input, `ReadPattern` says which producer tiles one
// consumer tile reads; input_tiles() turns that into producer tile indices.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/model_config.h"

namespace megaops {

enum class OpKind { Embedding, Norm, Matmul, Rope, Attention, Elementwise, Sample, Bookkeeping };
enum class StepKind { Decode, Prefill };

const char* op_kind_name(OpKind k);

// Which producer tiles one consumer tile reads.
enum class ReadPattern {
  AllFoldable,    // every column of its row block, consumable chunk by chunk in K order (matmul)
  AllRow,         // every column of its row block before it can finish (norm: the full row's sum of
                  // squares, or per-tile partials folded at the end)
  SameColumns,    // the producer tiles covering the consumer tile's own columns (elementwise, rope)
  GateUpPair,     // columns c and intermediate + c of a [gate | up] producer (SiLU-mul)
  AttentionHead,  // q columns of its head and the k and v columns of its KV head (GQA group);
                  // prefill: of every row block up to its own (causal)
  Whole,          // every tile of the producer (sampling over the whole vocabulary, bookkeeping)
};

const char* read_pattern_name(ReadPattern p);

struct OpInput {
  int producer = -1;  // index into OpGraph::ops
  ReadPattern pattern = ReadPattern::AllFoldable;
};

struct Op {
  std::string name;  // the conventional executor's op name ("qkv_proj")
  int layer = -1;    // -1 outside the layer stack
  OpKind kind = OpKind::Elementwise;
  int64_t m = 0, n = 0, k = 0;  // matmul-like shape: rows (tokens), output columns, reduction
  int64_t weight_bytes = 0;     // parameters read (embedding: only the rows gathered)
  int64_t kv_bytes = 0;         // KV cache read (attention); ready before the step's inputs are
  int64_t act_in_bytes = 0;     // activations read
  int64_t act_out_bytes = 0;    // activations written (rope also writes the new K/V rows)
  double flops = 0;
  // Output tiling.
  int64_t rows = 0, cols = 0;
  int64_t tile_rows = 0, tile_cols = 0;
  std::vector<OpInput> inputs;

  int64_t row_blocks() const { return (rows + tile_rows - 1) / tile_rows; }
  int64_t col_tiles() const { return (cols + tile_cols - 1) / tile_cols; }
  int64_t num_tiles() const { return row_blocks() * col_tiles(); }
  // Tile t covers row block t / col_tiles() and column block t % col_tiles().
  int64_t tile_col_begin(int64_t t) const { return (t % col_tiles()) * tile_cols; }
  int64_t tile_col_end(int64_t t) const;
};

struct OpGraph {
  std::string model;
  StepKind step = StepKind::Decode;
  int batch = 0;    // sequences (decode) or prefill tokens (prefill)
  int context = 0;  // KV positions each sequence attends to (decode) / before the chunk (prefill)
  std::vector<Op> ops;

  int64_t total_weight_bytes() const;
  double total_flops() const;
  int64_t total_tiles() const;
};

struct GraphOptions {
  int64_t min_tile_cols = 64;      // smallest column block of a tile
  int64_t max_tiles_per_op = 132;  // one wave of 132 SMs: keeps the tile graph small
  int64_t prefill_tile_rows = 128;
  int kv_dtype_bytes = 2;  // bf16 KV cache
};

// One decode step for `batch` sequences attending to `context` cached positions each: embedding,
// per layer [input_layernorm, qkv_proj, qkv_rope, decode_attention, o_proj,
// post_attention_layernorm, gate_up_proj, silu_mul, down_proj], final_norm, lm_head, sample,
// step_advance. Weights bf16; matmul outputs fp32 as in the conventional executor.
OpGraph build_decode_graph(const ModelConfig& cfg, const std::string& model, int batch, int context,
                           const GraphOptions& opt = {});

// One prefill chunk of `tokens` tokens of one sequence after `context` cached positions, ending
// with the LM head and sampling of the last row (the first token).
OpGraph build_prefill_graph(const ModelConfig& cfg, const std::string& model, int tokens,
                            int context, const GraphOptions& opt = {});

// The producer tiles that tile `tile` of op `consumer` reads through its input `input_index`,
// ascending. Throws InputError on out-of-range indices.
std::vector<int64_t> input_tiles(const OpGraph& g, int consumer, int input_index, int64_t tile);

// The producer row block that row block `rb` of `consumer` reads through input `input_index`
// (its last rows when the consumer has fewer rows, as the LM head after a prefill chunk).
int64_t producer_row_block(const OpGraph& g, int consumer, int input_index, int64_t rb);

// Index of the op with this name and layer, or -1.
int find_op(const OpGraph& g, const std::string& name, int layer);

}  // namespace megaops
