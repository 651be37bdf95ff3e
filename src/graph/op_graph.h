// The op graph of one decode step (or one prefill chunk) of a dense decoder: the ops in launch
// order, each with its code (what it computes), the tensors it reads and writes, its shapes,
// bytes, FLOPs, tiling contract and the neighbours it may fold into. models/step_graph.h builds it
// from a model's configuration; it is the one description of the step that the executors run
// (each walks the ops and launches what each code says), the planner composes and the profiler
// names. Plain data: nothing here runs a kernel.
//
// Tiling contract: an op's output is a [rows, cols] tensor cut into tiles of `tile_rows` rows x
// `tile_cols` columns (decode: one row block holding every batch row, so a tile is a block of
// output columns for all sequences). For each input, `ReadPattern` says which producer tiles one
// consumer tile reads; input_tiles() turns that into producer tile indices.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/model_config.h"

namespace megaops {

enum class OpKind {
  Embedding,
  Norm,
  Matmul,
  Rope,
  Attention,
  Elementwise,
  Sample,
  Bookkeeping,
  Collective,
  Conv  // 1-D convolution or transposed convolution (a codec decoder's; cuDNN on the GPU)
};
enum class StepKind { Decode, Prefill };

const char* op_kind_name(OpKind k);

// What an op computes: the executors launch by code, so a code they do not know is an error, not a
// silently skipped op.
enum class OpCode {
  Embedding,         // gather the tokens' rows of the embedding table into the residual stream
  InputNorm,         // residual += delta (after layer 0); normed = RMSNorm(residual) * ln1
  QkvProj,           // qkv = normed x Wqkv^T
  QkvRope,           // q / k norms (Qwen 3), RoPE; q out, the new k / v rows into the KV cache
  DecodeAttention,   // attn = attention of one query row per sequence over its cached positions
  PrefillAttention,  // attn = causal attention of the chunk's rows over their sequences' caches
  OProj,             // delta = attn x Wo^T
  AllReduce,         // delta summed over the tensor-parallel ranks (after o_proj and down_proj)
  PostNorm,          // residual += delta; normed = RMSNorm(residual) * ln2
  GateUpProj,        // gate_up = normed x [Wgate | Wup]^T
  SiluMul,           // act = SiLU(gate) * up
  DownProj,          // delta = act x Wdown^T
  FinalNorm,         // residual += delta; normed = RMSNorm(residual) * final norm
  LmHead,            // logits = normed rows x Wlm^T
  Sample,            // next token per sequence from the logits
  StepAdvance,       // positions, lengths and the fed-back tokens advanced on the device
  // A codec decoder's ops (models/codec_graph.h): codes to waveform samples, [batch x time,
  // channels]
  CodebookEmbed,    // x[t] = sum over codebooks q of table_q[code_q[t]] (residual VQ decode)
  Conv1d,           // causal 1-D convolution (+ bias)
  ConvTranspose1d,  // causal transposed 1-D convolution (upsampling by its stride, + bias)
  Elu,              // ELU activation
  Snake,            // SnakeBeta activation: x + sin^2(alpha x) / beta, per channel
  ResidualAdd,      // out = x + the residual block's input
};

const char* op_code_name(OpCode c);

// Neighbours an op may fold into (a fold computes the op inside the other kernel, bit for bit; the
// executor applies one where the plan asks for it and the kernel path allows it).
enum OpFold : uint32_t {
  FOLD_NONE = 0,
  FOLD_INTO_CONSUMER_PROLOGUE = 1,  // the next op computes it while loading its input (norm ->
                                    // matmul, SiLU-mul -> down, RoPE -> decode attention)
  FOLD_INTO_PRODUCER_EPILOGUE = 2,  // the op before writes its output (SiLU-mul <- gate_up,
                                    // greedy sampling <- LM head)
};

// A tensor of the step: a buffer the ops read and write (the residual stream is updated in place
// by the norms; delta is rewritten by every projection into the residual).
struct Tensor {
  std::string name;
  int64_t rows = 0, cols = 0;
  int elem_bytes = 0;
};

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

struct OpIo {
  std::vector<int> reads;   // tensors read (indices into OpGraph::tensors)
  std::vector<int> writes;  // tensors written
};

struct Op {
  std::string name;  // the op's name in profiles, plans and traces ("qkv_proj")
  int layer = -1;    // -1 outside the layer stack
  OpKind kind = OpKind::Elementwise;
  OpCode code = OpCode::Embedding;
  uint32_t folds = FOLD_NONE;  // OpFold bits
  OpIo io;
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
  int batch = 0;      // sequences (decode) or prefill tokens (prefill)
  int context = 0;    // KV positions each sequence attends to (decode) / before the chunk (prefill)
  int sequences = 0;  // sequences the step samples a token for
  std::vector<Op> ops;
  std::vector<Tensor> tensors;

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

// What an executor asks the model description for: the graph of a decode step of `rows`
// sequences, or of a prefill chunk of `rows` tokens of `sequences` sequences (its LM head and
// sampler run over their last rows), after `context` cached positions; `tensor_parallel` adds the
// all-reduce ops of the row-parallel projections.
struct StepRequest {
  StepKind step = StepKind::Decode;
  int rows = 1;
  int sequences = 1;
  int context = 0;
  bool tensor_parallel = false;
};

// The model description's step graph builder (models/step_graph.h: build_step_graph): what the
// executors are handed, so they run the graph without depending on how a model is described.
using StepGraphBuilder = OpGraph (*)(const ModelConfig& cfg, const StepRequest& req);

// Whether the executors run `op` as a vendor (cuBLASLt) GEMM: a matmul the default dispatch
// (core/matmul_dispatch.h, launched with PDL or not) puts on cuBLASLt. Such an op cannot take part
// in tile synchronisation: an overlap region waits around it, a persistent region ends before it.
bool is_vendor_gemm(const Op& op, bool pdl = false);

// Why the executors cannot run op `op_index` of decode graph `g` inside a persistent region
// (runtime/persistent.h), or "" when they can, on a GPU of `sms` SMs with matmuls dispatched with
// `pdl` or not: a matmul must run on the streaming kernel (its bulk version; batch 1), attention on
// the per-query-head kernel (2-8 query heads per kv head, every query head of the batch one CTA
// within the SMs), sampling in the LM head's greedy epilogue (the LM head streaming); prefill
// attention, all-reduces and step_advance never run in one. The planner's rule for which
// persistent candidates run; the executor checks the same on the kernels' own params.
std::string persistent_refusal(const OpGraph& g, int op_index, bool pdl, int sms);

// Whether the executors run `op` through a vendor library: a vendor GEMM, or a convolution
// (cuDNN). Such a launch has no PDL prologue and takes part in tile synchronisation only at chunk
// granularity.
bool is_vendor_op(const Op& op, bool pdl = false);

// Throws InputError naming the op unless every op of `g` has a code in `known` (an executor checks
// the graph it is handed before it runs it).
void check_op_codes(const OpGraph& g, const std::vector<OpCode>& known, const std::string& who);

// The producer tiles that tile `tile` of op `consumer` reads through its input `input_index`,
// ascending. Throws InputError on out-of-range indices.
std::vector<int64_t> input_tiles(const OpGraph& g, int consumer, int input_index, int64_t tile);

// The producer row block that row block `rb` of `consumer` reads through input `input_index`
// (its last rows when the consumer has fewer rows, as the LM head after a prefill chunk).
int64_t producer_row_block(const OpGraph& g, int consumer, int input_index, int64_t rb);

// g without ops [begin, begin + count) (whole layers of a layered graph: what the planners simulate
// of a step truncated to its first layers), the later ops' inputs renumbered by `count`.
OpGraph remove_op_range(const OpGraph& g, int begin, int count);

// Index of the op with this name and layer, or -1.
int find_op(const OpGraph& g, const std::string& name, int layer);

}  // namespace megaops
