// See op_graph.h.
#include "graph/op_graph.h"

#include <algorithm>

#include "core/error.h"
#include "core/matmul_dispatch.h"

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
    case OpKind::Collective:
      return "collective";
    case OpKind::Conv:
      return "conv";
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

OpGraph remove_op_range(const OpGraph& g, int begin, int count) {
  OpGraph t = g;
  t.ops.clear();
  for (int i = 0; i < static_cast<int>(g.ops.size()); ++i) {
    if (i >= begin && i < begin + count) continue;
    Op o = g.ops[static_cast<size_t>(i)];
    for (OpInput& in : o.inputs)
      if (in.producer >= begin) in.producer -= count;
    t.ops.push_back(std::move(o));
  }
  return t;
}

int find_op(const OpGraph& g, const std::string& name, int layer) {
  for (size_t i = 0; i < g.ops.size(); ++i)
    if (g.ops[i].name == name && g.ops[i].layer == layer) return static_cast<int>(i);
  return -1;
}

const char* op_code_name(OpCode c) {
  switch (c) {
    case OpCode::Embedding:
      return "embedding";
    case OpCode::InputNorm:
      return "input_layernorm";
    case OpCode::QkvProj:
      return "qkv_proj";
    case OpCode::QkvRope:
      return "qkv_rope";
    case OpCode::DecodeAttention:
      return "decode_attention";
    case OpCode::PrefillAttention:
      return "prefill_attention";
    case OpCode::OProj:
      return "o_proj";
    case OpCode::AllReduce:
      return "all_reduce";
    case OpCode::PostNorm:
      return "post_attention_layernorm";
    case OpCode::GateUpProj:
      return "gate_up_proj";
    case OpCode::SiluMul:
      return "silu_mul";
    case OpCode::DownProj:
      return "down_proj";
    case OpCode::FinalNorm:
      return "final_norm";
    case OpCode::LmHead:
      return "lm_head";
    case OpCode::Sample:
      return "sample";
    case OpCode::StepAdvance:
      return "step_advance";
    case OpCode::CodebookEmbed:
      return "codebook_embed";
    case OpCode::Conv1d:
      return "conv1d";
    case OpCode::ConvTranspose1d:
      return "conv_transpose1d";
    case OpCode::Elu:
      return "elu";
    case OpCode::Snake:
      return "snake";
    case OpCode::ResidualAdd:
      return "residual_add";
  }
  return "?";
}

void check_op_codes(const OpGraph& g, const std::vector<OpCode>& known, const std::string& who) {
  for (const Op& op : g.ops)
    if (std::find(known.begin(), known.end(), op.code) == known.end())
      throw_input_error(who, "op graph",
                        "expected ops it can run, found " + op.name +
                            (op.layer >= 0 ? " (layer " + std::to_string(op.layer) + ")" : "") +
                            " (" + op_code_name(op.code) + ")");
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

bool is_vendor_gemm(const Op& op, bool pdl) {
  return op.kind == OpKind::Matmul &&
         matmul_dispatch_path(op.m, op.n, op.k, pdl) == MatmulPath::CublasLt;
}

std::string persistent_refusal(const OpGraph& g, int op_index, bool pdl, int sms) {
  const Op& op = g.ops.at(static_cast<size_t>(op_index));
  switch (op.code) {
    case OpCode::Embedding:
    case OpCode::InputNorm:
    case OpCode::PostNorm:
    case OpCode::FinalNorm:
    case OpCode::QkvRope:
    case OpCode::SiluMul:
      return "";
    case OpCode::QkvProj:
    case OpCode::OProj:
    case OpCode::GateUpProj:
    case OpCode::DownProj:
    case OpCode::LmHead:
      switch (matmul_dispatch_path(op.m, op.n, op.k, pdl)) {
        case MatmulPath::Stream:
          return "";
        case MatmulPath::SmallM:
          return "a matmul on the small-m kernel";
        default:
          return "a cuBLASLt GEMM";
      }
    case OpCode::DecodeAttention: {
      const Op& rope = g.ops.at(static_cast<size_t>(op.inputs.at(0).producer));
      const int64_t hd = op.tile_cols, heads = op.cols / hd;
      const int64_t kv = (rope.cols - op.cols) / (2 * hd);
      const int64_t group = kv > 0 ? heads / kv : 0;
      if (group < 2 || group > 8)
        return "decode attention with other than 2-8 query heads per kv head";
      if (op.rows * heads > sms) return "decode attention with a CTA per kv head group";
      return "";
    }
    case OpCode::Sample: {
      const Op& lm = g.ops.at(static_cast<size_t>(op.inputs.at(0).producer));
      if ((op.folds & FOLD_INTO_PRODUCER_EPILOGUE) == 0 ||
          matmul_dispatch_path(lm.m, lm.n, lm.k, pdl) != MatmulPath::Stream)
        return "the sampler over the logits";
      return "";
    }
    default:
      return std::string(op_code_name(op.code)) + " (never in a persistent region)";
  }
}

bool is_vendor_op(const Op& op, bool pdl) {
  return op.kind == OpKind::Conv || is_vendor_gemm(op, pdl);
}

}  // namespace megaops
