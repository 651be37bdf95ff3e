// See codec_graph.h.
#include "models/codec_graph.h"

#include <algorithm>

#include "core/error.h"
#include "models/step_graph.h"

namespace megaops {

namespace {

constexpr int64_t CODEC_ROW_BLOCKS = 8;
constexpr int F32 = 4;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

OpGraph build_codec_graph(const CodecConfig& c, int batch, int frames, const GraphOptions& opt) {
  if (batch < 1 || frames < 1)
    throw_input_error(
        "codec graph", "batch, frames",
        "expected >= 1, found " + std::to_string(batch) + ", " + std::to_string(frames));
  const std::vector<CodecOp> ops = codec_ops(c);
  OpGraph g;
  g.model = "codec";
  g.step = StepKind::Decode;
  g.batch = batch;
  g.context = frames;
  g.sequences = batch;
  const int64_t row_blocks = std::min<int64_t>(CODEC_ROW_BLOCKS, int64_t{batch} * frames);
  const int64_t max_cols = std::max<int64_t>(1, opt.max_tiles_per_op / row_blocks);
  std::vector<int> tensor_of(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const CodecOp& co = ops[i];
    const int64_t rate_out = int64_t{co.rate_in} * co.stride;
    const int64_t rows_in = int64_t{batch} * frames * co.rate_in;
    const int64_t rows = int64_t{batch} * frames * rate_out;
    const int64_t cin = co.in_channels, cout = co.out_channels;
    g.tensors.push_back({"codec_" + std::to_string(i), rows, cout, F32});
    tensor_of[i] = static_cast<int>(g.tensors.size()) - 1;
    Op op;
    op.name = op_code_name(co.code);
    op.code = co.code;
    op.layer = -1;
    op.m = rows;
    op.n = cout;
    op.rows = rows;
    op.cols = cout;
    op.act_out_bytes = rows * cout * F32;
    switch (co.code) {
      case OpCode::CodebookEmbed:
        op.kind = OpKind::Embedding;
        op.k = cin;                                 // codebooks summed
        op.weight_bytes = rows * cin * cout * F32;  // only the gathered rows
        op.act_in_bytes = rows * cin * 4;
        op.flops = 1.0 * rows * cin * cout;
        break;
      case OpCode::Conv1d:
      case OpCode::ConvTranspose1d: {
        op.kind = OpKind::Conv;
        const bool tr = co.code == OpCode::ConvTranspose1d;
        // Multiply-adds per output value: in * kernel, over the stride for a transposed conv.
        op.k = tr ? ceil_div(cin * co.kernel, co.stride) : cin * co.kernel;
        op.weight_bytes = (cin * cout * co.kernel + cout) * F32;
        op.act_in_bytes = rows_in * cin * F32;
        op.flops = 2.0 * (tr ? rows_in : rows) * cin * cout * co.kernel;
        break;
      }
      case OpCode::Elu:
      case OpCode::Snake:
        op.kind = OpKind::Elementwise;
        op.weight_bytes = co.code == OpCode::Snake ? 2 * cout * F32 : 0;
        op.act_in_bytes = rows * cin * F32;
        op.flops = (co.code == OpCode::Snake ? 6.0 : 4.0) * rows * cout;
        break;
      case OpCode::ResidualAdd:
        op.kind = OpKind::Elementwise;
        op.act_in_bytes = 2 * rows * cin * F32;
        op.flops = 1.0 * rows * cout;
        break;
      default:
        throw_input_error("codec graph", "ops", std::string("unexpected op ") + op.name);
    }
    op.tile_rows = ceil_div(rows, row_blocks);
    op.tile_cols = std::max<int64_t>(opt.min_tile_cols, ceil_div(cout, max_cols));
    op.tile_cols = std::min<int64_t>(op.tile_cols, std::max<int64_t>(cout, 1));
    if (i > 0) {
      const ReadPattern p =
          op.kind == OpKind::Conv ? ReadPattern::AllRow : ReadPattern::SameColumns;
      op.inputs.push_back({static_cast<int>(i) - 1, p});
      op.io.reads.push_back(tensor_of[i - 1]);
    }
    if (co.code == OpCode::ResidualAdd) {
      op.inputs.push_back({co.skip, ReadPattern::SameColumns});
      op.io.reads.push_back(tensor_of[co.skip]);
    }
    op.io.writes.push_back(tensor_of[i]);
    g.ops.push_back(std::move(op));
  }
  return g;
}

PipelineGraphs build_pipeline_graphs(const PipelineConfig& p, int batch) {
  if (batch < 1 || batch > 64)
    throw_input_error("pipeline graphs", "batch", "expected 1..64, found " + std::to_string(batch));
  const PipelineSchedule& s = p.schedule;
  PipelineGraphs out;
  StepRequest pre;
  pre.step = StepKind::Prefill;
  pre.rows = batch * s.prompt_tokens;
  pre.sequences = batch;
  out.prefill = build_step_graph(p.producer, pre);
  out.prefill.model = p.name + " producer";
  out.producer_step = build_decode_graph(p.producer, p.name + " producer", batch,
                                         s.prompt_tokens + publication_step(p) * s.frames_per_step);
  out.local_step =
      build_decode_graph(p.local.model, p.name + " local", batch, p.local.codebooks / 2);
  const std::vector<StreamChunk> chunks = stream_chunks(p);
  const StreamChunk& first = chunks.front();
  out.codec_first = build_codec_graph(p.codec, batch, first.end_frame - first.window_first);
  // The steady chunk: the widest window after the first (its left context complete).
  int widest = first.end_frame - first.window_first;
  if (chunks.size() > 1) widest = 0;
  for (size_t i = 1; i < chunks.size(); ++i)
    widest = std::max(widest, chunks[i].end_frame - chunks[i].window_first);
  out.codec_chunk = build_codec_graph(p.codec, batch, widest);
  return out;
}

}  // namespace megaops
