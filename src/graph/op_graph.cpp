// See op_graph.h. Byte counts follow the conventional executor: bf16 weights and KV cache, an fp32
// residual stream, fp32 matmul outputs, bf16 inputs to every matmul.
#include "graph/op_graph.h"

#include <algorithm>

#include "core/error.h"

namespace megaops {

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::Embedding:
      return "embedding";
    case OpKind::Norm:
      return "norm";
    case OpKind::Matmul:
      return "matmul";
    case OpKind::Rope:
      return "rope";
    case OpKind::Attention:
      return "attention";
    case OpKind::Elementwise:
      return "elementwise";
    case OpKind::Sample:
      return "sample";
    case OpKind::Bookkeeping:
      return "bookkeeping";
  }
  return "?";
}

const char* read_pattern_name(ReadPattern p) {
  switch (p) {
    case ReadPattern::AllFoldable:
      return "all_foldable";
    case ReadPattern::AllRow:
      return "all_row";
    case ReadPattern::SameColumns:
      return "same_columns";
    case ReadPattern::GateUpPair:
      return "gate_up_pair";
    case ReadPattern::AttentionHead:
      return "attention_head";
    case ReadPattern::Whole:
      return "whole";
  }
  return "?";
}

int64_t Op::tile_col_end(int64_t t) const {
  return std::min(cols, tile_col_begin(t) + tile_cols);
}

int64_t OpGraph::total_weight_bytes() const {
  int64_t s = 0;
  for (const Op& o : ops) s += o.weight_bytes;
  return s;
}

double OpGraph::total_flops() const {
  double s = 0;
  for (const Op& o : ops) s += o.flops;
  return s;
}

int64_t OpGraph::total_tiles() const {
  int64_t s = 0;
  for (const Op& o : ops) s += o.num_tiles();
  return s;
}

int find_op(const OpGraph& g, const std::string& name, int layer) {
  for (size_t i = 0; i < g.ops.size(); ++i)
    if (g.ops[i].name == name && g.ops[i].layer == layer) return static_cast<int>(i);
  return -1;
}

namespace {

// Column block width: at least min_tile_cols (and a multiple of it), few enough tiles per op.
int64_t pick_tile_cols(int64_t cols, const GraphOptions& opt) {
  const int64_t per = (cols + opt.max_tiles_per_op - 1) / opt.max_tiles_per_op;
  const int64_t w = (per + opt.min_tile_cols - 1) / opt.min_tile_cols * opt.min_tile_cols;
  return std::max(opt.min_tile_cols, w);
}

struct Builder {
  const ModelConfig& cfg;
  const GraphOptions& opt;
  OpGraph g;
  int64_t tile_rows = 0;

  int add(Op op, std::vector<OpInput> inputs, int64_t forced_tile_cols = 0) {
    if (op.tile_rows == 0) op.tile_rows = std::min<int64_t>(tile_rows, op.rows);
    op.tile_cols = forced_tile_cols ? forced_tile_cols : pick_tile_cols(op.cols, opt);
    op.inputs = std::move(inputs);
    g.ops.push_back(std::move(op));
    return static_cast<int>(g.ops.size()) - 1;
  }

  Op matmul(const char* name, int layer, int64_t m, int64_t n, int64_t k) {
    Op o;
    o.name = name;
    o.layer = layer;
    o.kind = OpKind::Matmul;
    o.m = m;
    o.n = n;
    o.k = k;
    o.weight_bytes = n * k * 2;
    o.act_in_bytes = m * k * 2;
    o.act_out_bytes = m * n * 4;
    o.flops = 2.0 * m * n * k;
    o.rows = m;
    o.cols = n;
    return o;
  }

  // add + RMSNorm: reads the fp32 residual and (after layer 0) the fp32 delta, writes the residual
  // back and the bf16 normalised row.
  Op norm(const char* name, int layer, int64_t m, bool has_delta) {
    const int64_t h = cfg.hidden_size;
    Op o;
    o.name = name;
    o.layer = layer;
    o.kind = OpKind::Norm;
    o.m = m;
    o.n = h;
    o.weight_bytes = h * 2;
    o.act_in_bytes = m * h * 4 * (has_delta ? 2 : 1);
    o.act_out_bytes = m * h * (4 + 2);
    o.flops = 5.0 * m * h;
    o.rows = m;
    o.cols = h;
    return o;
  }

  // The layer stack for t rows; `decode` selects the attention op. Returns the last op.
  int layers(int64_t t, int context, bool decode, int prev) {
    const int64_t h = cfg.hidden_size, qd = cfg.q_dim(), kvd = cfg.kv_dim(),
                  inter = cfg.intermediate_size, hd = cfg.head_dim;
    for (int l = 0; l < cfg.num_layers; ++l) {
      const int n1 = add(norm("input_layernorm", l, t, l > 0), {{prev, ReadPattern::AllRow}});
      const int qkv =
          add(matmul("qkv_proj", l, t, qd + 2 * kvd, h), {{n1, ReadPattern::AllFoldable}});
      Op r;
      r.name = "qkv_rope";
      r.layer = l;
      r.kind = OpKind::Rope;
      r.m = t;
      r.n = qd + 2 * kvd;
      r.weight_bytes = cfg.has_qk_norm() ? 2 * hd * 2 : 0;
      r.act_in_bytes = t * (qd + 2 * kvd) * 4;
      r.act_out_bytes = t * (qd + 2 * kvd) * 2;  // q, and the new K/V rows into the cache
      r.flops = 6.0 * t * (qd + kvd);
      r.rows = t;
      r.cols = qd + 2 * kvd;
      const int rope = add(r, {{qkv, ReadPattern::SameColumns}}, hd);
      Op a;
      a.name = decode ? "decode_attention" : "prefill_attention";
      a.layer = l;
      a.kind = OpKind::Attention;
      a.m = t;
      a.n = qd;
      a.k = context;
      const int64_t seqs = decode ? t : 1;
      a.kv_bytes = seqs * static_cast<int64_t>(context) * kvd * 2 * opt.kv_dtype_bytes;
      a.act_in_bytes = t * (qd + 2 * kvd) * 2;
      a.act_out_bytes = t * qd * 2;
      // Each query row attends to `context` cached positions (+ the causal part of the chunk).
      const double positions = decode ? context + 1.0 : context + (t + 1) / 2.0;
      a.flops = 4.0 * t * cfg.num_heads * hd * positions;
      a.rows = t;
      a.cols = qd;
      const int att = add(a, {{rope, ReadPattern::AttentionHead}}, hd);
      const int o = add(matmul("o_proj", l, t, h, qd), {{att, ReadPattern::AllFoldable}});
      const int n2 = add(norm("post_attention_layernorm", l, t, true), {{o, ReadPattern::AllRow}});
      const int gu =
          add(matmul("gate_up_proj", l, t, 2 * inter, h), {{n2, ReadPattern::AllFoldable}});
      Op s;
      s.name = "silu_mul";
      s.layer = l;
      s.kind = OpKind::Elementwise;
      s.m = t;
      s.n = inter;
      s.act_in_bytes = t * 2 * inter * 4;
      s.act_out_bytes = t * inter * 2;
      s.flops = 4.0 * t * inter;
      s.rows = t;
      s.cols = inter;
      const int sm = add(s, {{gu, ReadPattern::GateUpPair}});
      prev = add(matmul("down_proj", l, t, h, inter), {{sm, ReadPattern::AllFoldable}});
    }
    return prev;
  }

  Op embedding(int64_t t) {
    const int64_t h = cfg.hidden_size;
    Op e;
    e.name = "embedding";
    e.kind = OpKind::Embedding;
    e.m = t;
    e.n = h;
    e.weight_bytes = t * h * 2;  // only the gathered rows of the table
    e.act_in_bytes = t * 4;
    e.act_out_bytes = t * h * 4;
    e.rows = t;
    e.cols = h;
    return e;
  }

  // final_norm, lm_head and sampling over b rows.
  int head(int64_t b, int prev) {
    const int fn = add(norm("final_norm", -1, b, true), {{prev, ReadPattern::AllRow}});
    const int lm = add(matmul("lm_head", -1, b, cfg.vocab_size, cfg.hidden_size),
                       {{fn, ReadPattern::AllFoldable}});
    Op s;
    s.name = "sample";
    s.kind = OpKind::Sample;
    s.m = b;
    s.n = cfg.vocab_size;
    s.act_in_bytes = b * int64_t{cfg.vocab_size} * 4;
    s.act_out_bytes = b * 4;
    s.flops = 5.0 * b * cfg.vocab_size;
    s.rows = b;
    s.cols = 1;
    s.tile_rows = b;
    return add(s, {{lm, ReadPattern::Whole}}, 1);
  }
};

void check_sizes(const ModelConfig& cfg, int rows, int context, const char* rows_name) {
  if (cfg.num_layers < 1 || cfg.hidden_size < 1 || cfg.head_dim < 1 || cfg.num_kv_heads < 1)
    throw_input_error("op graph", "config", "expected a validated model config");
  if (rows < 1)
    throw_input_error("op graph", rows_name, "expected >= 1, found " + std::to_string(rows));
  if (context < 0)
    throw_input_error("op graph", "context", "expected >= 0, found " + std::to_string(context));
}

}  // namespace

OpGraph build_decode_graph(const ModelConfig& cfg, const std::string& model, int batch, int context,
                           const GraphOptions& opt) {
  check_sizes(cfg, batch, context, "batch");
  Builder b{cfg, opt, {}, batch};
  b.g.model = model;
  b.g.step = StepKind::Decode;
  b.g.batch = batch;
  b.g.context = context;
  const int e = b.add(b.embedding(batch), {});
  const int last = b.layers(batch, context, /*decode=*/true, e);
  const int s = b.head(batch, last);
  Op adv;
  adv.name = "step_advance";
  adv.kind = OpKind::Bookkeeping;
  adv.m = batch;
  adv.act_in_bytes = batch * 8;
  adv.act_out_bytes = batch * 8;
  adv.rows = batch;
  adv.cols = 1;
  b.add(adv, {{s, ReadPattern::Whole}}, 1);
  return b.g;
}

OpGraph build_prefill_graph(const ModelConfig& cfg, const std::string& model, int tokens,
                            int context, const GraphOptions& opt) {
  check_sizes(cfg, tokens, context, "tokens");
  Builder b{cfg, opt, {}, opt.prefill_tile_rows};
  b.g.model = model;
  b.g.step = StepKind::Prefill;
  b.g.batch = tokens;
  b.g.context = context;
  const int e = b.add(b.embedding(tokens), {});
  const int last = b.layers(tokens, context, /*decode=*/false, e);
  b.head(1, last);  // the first generated token comes from the chunk's last row
  return b.g;
}

int64_t producer_row_block(const OpGraph& g, int consumer, int input_index, int64_t rb) {
  const Op& c = g.ops.at(consumer);
  const Op& p = g.ops.at(c.inputs.at(input_index).producer);
  return c.rows < p.rows ? p.row_blocks() - c.row_blocks() + rb : std::min(rb, p.row_blocks() - 1);
}

std::vector<int64_t> input_tiles(const OpGraph& g, int consumer, int input_index, int64_t tile) {
  if (consumer < 0 || consumer >= static_cast<int>(g.ops.size()))
    throw_input_error(
        "op graph", "consumer",
        "expected 0.." + std::to_string(g.ops.size()) + ", found " + std::to_string(consumer));
  const Op& c = g.ops[consumer];
  if (input_index < 0 || input_index >= static_cast<int>(c.inputs.size()))
    throw_input_error("op graph", c.name + " input", "index out of range");
  if (tile < 0 || tile >= c.num_tiles())
    throw_input_error(
        "op graph", c.name + " tile",
        "expected 0.." + std::to_string(c.num_tiles() - 1) + ", found " + std::to_string(tile));
  const OpInput& in = c.inputs[input_index];
  const Op& p = g.ops[in.producer];
  const int64_t rb = tile / c.col_tiles();
  const int64_t prb = producer_row_block(g, consumer, input_index, rb);
  const int64_t pct = p.col_tiles();
  std::vector<int64_t> out;
  auto cols = [&](int64_t row_block, int64_t c0, int64_t c1) {
    for (int64_t t = c0 / p.tile_cols; t * p.tile_cols < c1 && t < pct; ++t)
      out.push_back(row_block * pct + t);
  };
  const int64_t c0 = c.tile_col_begin(tile), c1 = c.tile_col_end(tile);
  switch (in.pattern) {
    case ReadPattern::AllFoldable:
    case ReadPattern::AllRow:
      cols(prb, 0, p.cols);
      break;
    case ReadPattern::SameColumns:
      cols(prb, c0, c1);
      break;
    case ReadPattern::GateUpPair:
      cols(prb, c0, c1);
      cols(prb, c.cols + c0, c.cols + c1);
      break;
    case ReadPattern::AttentionHead: {
      const int64_t hd = c.tile_cols, heads = c.cols / hd, kv = (p.cols - c.cols) / (2 * hd);
      const int64_t group = heads / kv, head = c0 / hd, kvh = head / group;
      const bool causal = g.step == StepKind::Prefill;
      for (int64_t r = causal ? 0 : prb; r <= prb; ++r) {
        cols(r, head * hd, (head + 1) * hd);
        cols(r, c.cols + kvh * hd, c.cols + (kvh + 1) * hd);
        cols(r, c.cols + (kv + kvh) * hd, c.cols + (kv + kvh + 1) * hd);
      }
      break;
    }
    case ReadPattern::Whole:
      for (int64_t t = 0; t < p.num_tiles(); ++t) out.push_back(t);
      break;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace megaops
