// See step_graph.h. Byte counts follow the executors: bf16 weights and KV cache, an fp32 residual
// stream, fp32 matmul outputs, bf16 inputs to every matmul.
#include "models/step_graph.h"

#include <algorithm>

#include "core/error.h"

namespace megaops {

namespace {

// Column block width: at least min_tile_cols (and a multiple of it), few enough tiles per op.
int64_t pick_tile_cols(int64_t cols, const GraphOptions& opt) {
  const int64_t per = (cols + opt.max_tiles_per_op - 1) / opt.max_tiles_per_op;
  const int64_t w = (per + opt.min_tile_cols - 1) / opt.min_tile_cols * opt.min_tile_cols;
  return std::max(opt.min_tile_cols, w);
}

// The step's tensors, by index into OpGraph::tensors.
struct Tensors {
  int tokens, positions, residual, normed, qkv, q, kv_cache, attn, delta, gate_up, act, logits;
};

struct Builder {
  const ModelConfig& cfg;
  const GraphOptions& opt;
  OpGraph g;
  int64_t tile_rows = 0;
  bool tensor_parallel = false;
  Tensors t{};

  int tensor(const char* name, int64_t rows, int64_t cols, int elem_bytes) {
    g.tensors.push_back({name, rows, cols, elem_bytes});
    return static_cast<int>(g.tensors.size()) - 1;
  }

  // The tensors of a step over `rows` rows sampling `seqs` sequences, after `context` positions.
  void tensors(int64_t rows, int64_t seqs, int64_t context) {
    const int64_t h = cfg.hidden_size, qd = cfg.q_dim(), kvd = cfg.kv_dim(),
                  inter = cfg.intermediate_size;
    t.tokens = tensor("tokens", rows, 1, 4);
    t.positions = tensor("positions", rows, 1, 4);
    t.residual = tensor("residual", rows, h, 4);
    t.normed = tensor("normed", rows, h, 2);
    t.qkv = tensor("qkv", rows, qd + 2 * kvd, 4);
    t.q = tensor("q", rows, qd, 2);
    t.kv_cache = tensor("kv_cache", context + rows, 2 * kvd, opt.kv_dtype_bytes);
    t.attn = tensor("attn", rows, qd, 2);
    t.delta = tensor("delta", rows, h, 4);
    t.gate_up = tensor("gate_up", rows, 2 * inter, 4);
    t.act = tensor("act", rows, inter, 2);
    t.logits = tensor("logits", seqs, cfg.vocab_size, 4);
  }

  int add(Op op, std::vector<OpInput> inputs, OpIo io, int64_t forced_tile_cols = 0) {
    if (op.tile_rows == 0) op.tile_rows = std::min<int64_t>(tile_rows, op.rows);
    op.tile_cols = forced_tile_cols ? forced_tile_cols : pick_tile_cols(op.cols, opt);
    op.inputs = std::move(inputs);
    op.io = std::move(io);
    g.ops.push_back(std::move(op));
    return static_cast<int>(g.ops.size()) - 1;
  }

  static Op base(const char* name, OpCode code, OpKind kind, int layer, int64_t m, int64_t n) {
    Op o;
    o.name = name;
    o.code = code;
    o.kind = kind;
    o.layer = layer;
    o.m = m;
    o.n = n;
    o.rows = m;
    o.cols = n;
    return o;
  }

  Op matmul(const char* name, OpCode code, int layer, int64_t m, int64_t n, int64_t k) {
    Op o = base(name, code, OpKind::Matmul, layer, m, n);
    o.k = k;
    o.weight_bytes = n * k * 2;
    o.act_in_bytes = m * k * 2;
    o.act_out_bytes = m * n * 4;
    o.flops = 2.0 * m * n * k;
    return o;
  }

  // add + RMSNorm: reads the fp32 residual and (after layer 0) the fp32 delta, writes the residual
  // back and the bf16 normalised row. It may fold into the matmul after it.
  Op norm(const char* name, OpCode code, int layer, int64_t m, bool has_delta) {
    const int64_t h = cfg.hidden_size;
    Op o = base(name, code, OpKind::Norm, layer, m, h);
    o.folds = FOLD_INTO_CONSUMER_PROLOGUE;
    o.weight_bytes = h * 2;
    o.act_in_bytes = m * h * 4 * (has_delta ? 2 : 1);
    o.act_out_bytes = m * h * (4 + 2);
    o.flops = 5.0 * m * h;
    return o;
  }
  OpIo norm_io(bool has_delta) const {
    OpIo io{{t.residual}, {t.residual, t.normed}};
    if (has_delta) io.reads.push_back(t.delta);
    return io;
  }

  // The sum over the tensor-parallel ranks of a row-parallel projection's partial delta.
  int all_reduce(const char* name, int layer, int64_t m, int prev) {
    const int64_t h = cfg.hidden_size;
    Op o = base(name, OpCode::AllReduce, OpKind::Collective, layer, m, h);
    o.act_in_bytes = m * h * 4;
    o.act_out_bytes = m * h * 4;
    o.flops = 1.0 * m * h;
    return add(o, {{prev, ReadPattern::SameColumns}}, {{t.delta}, {t.delta}});
  }

  int attention(int l, int64_t rows, int context, bool decode, int rope) {
    const int64_t qd = cfg.q_dim(), kvd = cfg.kv_dim(), hd = cfg.head_dim;
    Op a = base(decode ? "decode_attention" : "prefill_attention",
                decode ? OpCode::DecodeAttention : OpCode::PrefillAttention, OpKind::Attention, l,
                rows, qd);
    a.k = context;
    const int64_t seqs = decode ? rows : 1;
    a.kv_bytes = seqs * static_cast<int64_t>(context) * kvd * 2 * opt.kv_dtype_bytes;
    a.act_in_bytes = rows * (qd + 2 * kvd) * 2;
    a.act_out_bytes = rows * qd * 2;
    // Each query row attends to `context` cached positions (+ the causal part of the chunk).
    const double positions = decode ? context + 1.0 : context + (rows + 1) / 2.0;
    a.flops = 4.0 * rows * cfg.num_heads * hd * positions;
    return add(a, {{rope, ReadPattern::AttentionHead}}, {{t.q, t.kv_cache}, {t.attn}}, hd);
  }

  int qkv_rope(int l, int64_t rows, bool decode, int qkv) {
    const int64_t qd = cfg.q_dim(), kvd = cfg.kv_dim(), hd = cfg.head_dim;
    Op r = base("qkv_rope", OpCode::QkvRope, OpKind::Rope, l, rows, qd + 2 * kvd);
    // Decode attention may compute it in its prologue (the per-query-head kernel).
    if (decode) r.folds = FOLD_INTO_CONSUMER_PROLOGUE;
    r.weight_bytes = cfg.has_qk_norm() ? 2 * hd * 2 : 0;
    r.act_in_bytes = rows * (qd + 2 * kvd) * 4;
    r.act_out_bytes = rows * (qd + 2 * kvd) * 2;  // q, and the new K/V rows into the cache
    r.flops = 6.0 * rows * (qd + kvd);
    return add(r, {{qkv, ReadPattern::SameColumns}}, {{t.qkv, t.positions}, {t.q, t.kv_cache}}, hd);
  }

  int silu_mul(int l, int64_t rows, int gu) {
    const int64_t inter = cfg.intermediate_size;
    Op s = base("silu_mul", OpCode::SiluMul, OpKind::Elementwise, l, rows, inter);
    s.folds = FOLD_INTO_CONSUMER_PROLOGUE | FOLD_INTO_PRODUCER_EPILOGUE;
    s.act_in_bytes = rows * 2 * inter * 4;
    s.act_out_bytes = rows * inter * 2;
    s.flops = 4.0 * rows * inter;
    return add(s, {{gu, ReadPattern::GateUpPair}}, {{t.gate_up}, {t.act}});
  }

  // The layer stack for `rows` rows; `decode` selects the attention op. Returns the last op.
  int layers(int64_t rows, int context, bool decode, int prev) {
    const int64_t h = cfg.hidden_size, qd = cfg.q_dim(), kvd = cfg.kv_dim(),
                  inter = cfg.intermediate_size;
    for (int l = 0; l < cfg.num_layers; ++l) {
      const int n1 = add(norm("input_layernorm", OpCode::InputNorm, l, rows, l > 0),
                         {{prev, ReadPattern::AllRow}}, norm_io(l > 0));
      const int qkv = add(matmul("qkv_proj", OpCode::QkvProj, l, rows, qd + 2 * kvd, h),
                          {{n1, ReadPattern::AllFoldable}}, {{t.normed}, {t.qkv}});
      const int rope = qkv_rope(l, rows, decode, qkv);
      const int att = attention(l, rows, context, decode, rope);
      int o = add(matmul("o_proj", OpCode::OProj, l, rows, h, qd),
                  {{att, ReadPattern::AllFoldable}}, {{t.attn}, {t.delta}});
      if (tensor_parallel) o = all_reduce("o_proj_all_reduce", l, rows, o);
      const int n2 = add(norm("post_attention_layernorm", OpCode::PostNorm, l, rows, true),
                         {{o, ReadPattern::AllRow}}, norm_io(true));
      const int gu = add(matmul("gate_up_proj", OpCode::GateUpProj, l, rows, 2 * inter, h),
                         {{n2, ReadPattern::AllFoldable}}, {{t.normed}, {t.gate_up}});
      const int sm = silu_mul(l, rows, gu);
      prev = add(matmul("down_proj", OpCode::DownProj, l, rows, h, inter),
                 {{sm, ReadPattern::AllFoldable}}, {{t.act}, {t.delta}});
      if (tensor_parallel) prev = all_reduce("down_proj_all_reduce", l, rows, prev);
    }
    return prev;
  }

  int embedding(int64_t rows) {
    const int64_t h = cfg.hidden_size;
    Op e = base("embedding", OpCode::Embedding, OpKind::Embedding, -1, rows, h);
    e.weight_bytes = rows * h * 2;  // only the gathered rows of the table
    e.act_in_bytes = rows * 4;
    e.act_out_bytes = rows * h * 4;
    return add(e, {}, {{t.tokens}, {t.residual}});
  }

  // final_norm over `rows` rows, then the LM head and sampling over the `seqs` rows it samples
  // (every row in decode; each sequence's last row in prefill).
  int head(int64_t rows, int64_t seqs, int prev) {
    const int fn = add(norm("final_norm", OpCode::FinalNorm, -1, rows, true),
                       {{prev, ReadPattern::AllRow}}, norm_io(true));
    const int lm = add(matmul("lm_head", OpCode::LmHead, -1, seqs, cfg.vocab_size, cfg.hidden_size),
                       {{fn, ReadPattern::AllFoldable}}, {{t.normed}, {t.logits}});
    Op s = base("sample", OpCode::Sample, OpKind::Sample, -1, seqs, 1);
    s.n = cfg.vocab_size;
    s.folds = FOLD_INTO_PRODUCER_EPILOGUE;  // greedy: the LM head's argmax epilogue
    s.act_in_bytes = seqs * int64_t{cfg.vocab_size} * 4;
    s.act_out_bytes = seqs * 4;
    s.flops = 5.0 * seqs * cfg.vocab_size;
    s.tile_rows = seqs;
    return add(s, {{lm, ReadPattern::Whole}}, {{t.logits}, {t.tokens}}, 1);
  }

  void step_advance(int64_t batch, int prev) {
    Op adv = base("step_advance", OpCode::StepAdvance, OpKind::Bookkeeping, -1, batch, 1);
    adv.act_in_bytes = batch * 8;
    adv.act_out_bytes = batch * 8;
    add(adv, {{prev, ReadPattern::Whole}}, {{t.tokens, t.positions}, {t.tokens, t.positions}}, 1);
  }
};

void check_sizes(const ModelConfig& cfg, const StepRequest& req) {
  if (cfg.num_layers < 1 || cfg.hidden_size < 1 || cfg.head_dim < 1 || cfg.num_kv_heads < 1)
    throw_input_error("step graph", "config", "expected a validated model config");
  const char* rows_name = req.step == StepKind::Decode ? "batch" : "tokens";
  if (req.rows < 1)
    throw_input_error("step graph", rows_name, "expected >= 1, found " + std::to_string(req.rows));
  if (req.context < 0)
    throw_input_error("step graph", "context",
                      "expected >= 0, found " + std::to_string(req.context));
  if (req.step == StepKind::Prefill && (req.sequences < 1 || req.sequences > req.rows))
    throw_input_error("step graph", "sequences",
                      "expected 1.." + std::to_string(req.rows) + " (the chunk's tokens), found " +
                          std::to_string(req.sequences));
}

OpGraph build(const ModelConfig& cfg, const std::string& model, const StepRequest& req,
              const GraphOptions& opt) {
  check_sizes(cfg, req);
  const bool decode = req.step == StepKind::Decode;
  const int seqs = decode ? req.rows : req.sequences;
  Builder b{cfg, opt, {}, decode ? req.rows : opt.prefill_tile_rows, req.tensor_parallel};
  b.g.model = model;
  b.g.step = req.step;
  b.g.batch = req.rows;
  b.g.context = req.context;
  b.g.sequences = seqs;
  b.tensors(req.rows, seqs, req.context);
  const int e = b.embedding(req.rows);
  const int last = b.layers(req.rows, req.context, decode, e);
  const int s = b.head(req.rows, seqs, last);
  if (decode) b.step_advance(req.rows, s);
  return b.g;
}

}  // namespace

OpGraph build_step_graph(const ModelConfig& cfg, const StepRequest& req) {
  return build(cfg, "", req, GraphOptions{});
}

OpGraph build_decode_graph(const ModelConfig& cfg, const std::string& model, int batch, int context,
                           const GraphOptions& opt) {
  StepRequest req;
  req.step = StepKind::Decode;
  req.rows = batch;
  req.sequences = batch;
  req.context = context;
  return build(cfg, model, req, opt);
}

OpGraph build_prefill_graph(const ModelConfig& cfg, const std::string& model, int tokens,
                            int context, const GraphOptions& opt) {
  StepRequest req;
  req.step = StepKind::Prefill;
  req.rows = tokens;
  req.sequences = 1;
  req.context = context;
  return build(cfg, model, req, opt);
}

}  // namespace megaops
