// See pipeline.h.
#include "graph/pipeline.h"

#include <algorithm>
#include <cmath>

#include "core/counter_rng.h"
#include "core/error.h"

namespace megaops {

const char* codec_layer_kind_name(CodecLayerKind k) {
  switch (k) {
    case CodecLayerKind::Conv1d:
      return "conv1d";
    case CodecLayerKind::ConvTranspose1d:
      return "conv_transpose1d";
    case CodecLayerKind::Elu:
      return "elu";
    case CodecLayerKind::Snake:
      return "snake";
    case CodecLayerKind::Residual:
      return "residual";
  }
  return "?";
}

namespace {

// Appends the ops of `layers` (input `channels` at `rate` samples per frame) to `out`; returns the
// output channels and updates rate and the weight count.
int flatten(const std::vector<CodecLayer>& layers, int channels, int& rate, int& weights,
            std::vector<CodecOp>& out) {
  for (const CodecLayer& l : layers) {
    CodecOp op;
    op.rate_in = rate;
    op.in_channels = channels;
    op.out_channels = channels;
    switch (l.kind) {
      case CodecLayerKind::Conv1d:
      case CodecLayerKind::ConvTranspose1d:
        op.code = l.kind == CodecLayerKind::Conv1d ? OpCode::Conv1d : OpCode::ConvTranspose1d;
        op.out_channels = l.out_channels;
        op.kernel = l.kernel;
        op.stride = l.kind == CodecLayerKind::Conv1d ? 1 : l.stride;
        op.dilation = l.kind == CodecLayerKind::Conv1d ? l.dilation : 1;
        op.weight = weights;
        weights += 2;
        rate *= op.stride;
        break;
      case CodecLayerKind::Elu:
        op.code = OpCode::Elu;
        break;
      case CodecLayerKind::Snake:
        op.code = OpCode::Snake;
        op.weight = weights;
        weights += 2;
        break;
      case CodecLayerKind::Residual: {
        const int skip = static_cast<int>(out.size()) - 1;
        const int body_out = flatten(l.body, channels, rate, weights, out);
        op.rate_in = rate;
        op.code = OpCode::ResidualAdd;
        op.in_channels = body_out;
        op.out_channels = body_out;
        op.skip = skip;
        break;
      }
    }
    channels = op.out_channels;
    out.push_back(op);
  }
  return channels;
}

// Uniform on [-a, a] with std `std`.
float uniform_with_std(uint64_t seed, uint32_t tensor, size_t i, float std) {
  const float u = counter_uniform(seed, tensor, i);
  return (u * 2.0f - 1.0f) * std * std::sqrt(3.0f);
}

bool ends_with(const std::string& s, const char* suffix) {
  const std::string x(suffix);
  return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

std::string num(double v) {
  std::string s = std::to_string(v);
  while (s.find('.') != std::string::npos && (s.back() == '0' || s.back() == '.')) {
    const bool dot = s.back() == '.';
    s.pop_back();
    if (dot) break;
  }
  return s;
}

void require(bool ok, const std::string& origin, const std::string& field,
             const std::string& message) {
  if (!ok) throw_input_error(origin, field, message);
}

}  // namespace

std::vector<CodecOp> codec_ops(const CodecConfig& c) {
  std::vector<CodecOp> ops;
  CodecOp embed;
  embed.code = OpCode::CodebookEmbed;
  embed.in_channels = c.codebooks;
  embed.out_channels = c.codebook_dim;
  embed.weight = 0;
  ops.push_back(embed);
  int rate = 1, weights = 1;
  flatten(c.layers, c.codebook_dim, rate, weights, ops);
  return ops;
}

int codec_hop(const CodecConfig& c) {
  int hop = 1;
  for (const CodecOp& op : codec_ops(c)) hop *= op.stride;
  return hop;
}

int codec_left_context_frames(const CodecConfig& c) {
  double reach = 0;
  for (const CodecOp& op : codec_ops(c)) {
    if (op.code == OpCode::Conv1d)
      reach += static_cast<double>(op.kernel - 1) * op.dilation / op.rate_in;
    else if (op.code == OpCode::ConvTranspose1d)
      reach += static_cast<double>(op.kernel - 1) / (static_cast<double>(op.rate_in) * op.stride);
  }
  return static_cast<int>(std::ceil(reach - 1e-9));
}

std::vector<WeightSpec> codec_weight_specs(const CodecConfig& c) {
  std::vector<WeightSpec> specs;
  specs.push_back({"codec.codebooks", {c.codebooks, c.codebook_size, c.codebook_dim}});
  const std::vector<CodecOp> ops = codec_ops(c);
  for (size_t i = 0; i < ops.size(); ++i) {
    const CodecOp& op = ops[i];
    const std::string base = "codec.ops." + std::to_string(i) + "." + op_code_name(op.code);
    if (op.code == OpCode::Conv1d)
      specs.push_back({base + ".weight", {op.out_channels, op.in_channels, op.kernel}});
    else if (op.code == OpCode::ConvTranspose1d)
      specs.push_back({base + ".weight", {op.in_channels, op.out_channels, op.kernel}});
    if (op.code == OpCode::Conv1d || op.code == OpCode::ConvTranspose1d)
      specs.push_back({base + ".bias", {op.out_channels}});
    if (op.code == OpCode::Snake) {
      specs.push_back({base + ".alpha", {op.in_channels}});
      specs.push_back({base + ".beta", {op.in_channels}});
    }
  }
  return specs;
}

void codec_weight_values(const WeightSpec& spec, uint32_t tensor_index, uint64_t seed, size_t begin,
                         size_t count, float* out) {
  float std = 0.01f, offset = 0.0f;
  if (spec.name == "codec.codebooks") {
    std = 1.0f / std::sqrt(static_cast<float>(spec.shape.at(0)));
  } else if (ends_with(spec.name, "conv1d.weight")) {
    // [out, in, kernel]: fan-in in * kernel.
    std = 1.0f / std::sqrt(static_cast<float>(spec.shape.at(1) * spec.shape.at(2)));
  } else if (ends_with(spec.name, "conv_transpose1d.weight")) {
    // [in, out, kernel]: an output sample sums in * kernel / stride terms, 2 * in where the
    // kernel is twice the stride (every codec here).
    std = 1.0f / std::sqrt(static_cast<float>(2 * spec.shape.at(0)));
  } else if (ends_with(spec.name, ".alpha") || ends_with(spec.name, ".beta")) {
    std = 0.1f / std::sqrt(3.0f);
    offset = 1.0f;
  }
  for (size_t i = 0; i < count; ++i)
    out[i] = offset + uniform_with_std(seed, tensor_index, begin + i, std);
}

int producer_steps(const PipelineSchedule& s) {
  return s.stream_frames / s.frames_per_step;
}

int frame_step(const PipelineSchedule& s, int frame) {
  return frame / s.frames_per_step + 1;
}

int frame_ready_step(const PipelineSchedule& s, int frame) {
  return std::min(producer_steps(s), frame_step(s, frame) + s.delay_steps);
}

std::vector<StreamChunk> stream_chunks(const PipelineConfig& p) {
  const PipelineSchedule& s = p.schedule;
  const int left = codec_left_context_frames(p.codec);
  std::vector<StreamChunk> out;
  for (int f = 0; f < s.stream_frames;) {
    StreamChunk c;
    c.first_frame = f;
    c.end_frame =
        std::min(s.stream_frames, f + (out.empty() ? s.first_chunk_frames : s.chunk_frames));
    c.ready_step = frame_ready_step(s, c.end_frame - 1);
    c.window_first = std::max(0, f - left);
    out.push_back(c);
    f = c.end_frame;
  }
  return out;
}

int publication_step(const PipelineConfig& p) {
  return frame_ready_step(p.schedule, p.schedule.first_chunk_frames - 1) +
         p.schedule.lookahead_steps;
}

namespace {

// The layers' total upsampling, or MAX_HOP + 1 once it passes MAX_HOP.
constexpr int64_t MAX_HOP = 1 << 20;
int64_t upsampling(const std::vector<CodecLayer>& layers) {
  int64_t hop = 1;
  for (const CodecLayer& l : layers) {
    if (l.kind == CodecLayerKind::ConvTranspose1d) hop *= std::max(1, l.stride);
    if (l.kind == CodecLayerKind::Residual) hop *= upsampling(l.body);
    if (hop > MAX_HOP) return MAX_HOP + 1;
  }
  return hop;
}

void validate_stages(const PipelineConfig& p, const std::string& origin) {
  const LocalTransformerConfig& lt = p.local;
  const CodecConfig& c = p.codec;
  // First: the op list's sample rates must fit in 32 bits.
  require(upsampling(c.layers) <= MAX_HOP, origin, "stages[2].layers",
          "expected an upsampling of at most " + std::to_string(MAX_HOP) +
              " samples a frame, found more");
  require(
      lt.codebooks >= 2, origin, "stages[1].codebooks",
      "expected >= 2 (codebook 0 comes from the producer), found " + std::to_string(lt.codebooks));
  require(lt.codebook_size >= 1, origin, "stages[1].codebook_size",
          "expected >= 1, found " + std::to_string(lt.codebook_size));
  require(p.producer.vocab_size == lt.codebook_size, origin, "stages[0].model.vocab_size",
          "expected " + std::to_string(lt.codebook_size) +
              " (stages[1].codebook_size: the producer's head emits codebook-0 codes), found " +
              std::to_string(p.producer.vocab_size));
  const int64_t lt_vocab = int64_t{lt.codebooks} * lt.codebook_size;
  require(lt.model.vocab_size == lt_vocab, origin, "stages[1].model.vocab_size",
          "expected " + std::to_string(lt_vocab) +
              " (codebooks x codebook_size: one embedding and head slice per codebook), found " +
              std::to_string(lt.model.vocab_size));
  require(lt.codebooks <= lt.model.max_position_embeddings, origin,
          "stages[1].model.max_position_embeddings",
          "expected >= codebooks (" + std::to_string(lt.codebooks) + "), found " +
              std::to_string(lt.model.max_position_embeddings));
  require(c.codebooks == lt.codebooks, origin, "stages[2].codebooks",
          "expected " + std::to_string(lt.codebooks) + " (stages[1].codebooks), found " +
              std::to_string(c.codebooks));
  require(c.codebook_size == lt.codebook_size, origin, "stages[2].codebook_size",
          "expected " + std::to_string(lt.codebook_size) + " (stages[1].codebook_size), found " +
              std::to_string(c.codebook_size));
  const std::vector<CodecOp> ops = codec_ops(c);
  require(ops.back().out_channels == 1, origin, "stages[2].layers",
          "expected the last layer to give 1 channel (mono samples), found " +
              std::to_string(ops.back().out_channels));
  const int hop = codec_hop(c);
  require(std::fabs(c.frame_rate * hop - c.sample_rate) < 1e-6 * c.sample_rate, origin,
          "stages[2].frame_rate",
          "expected sample_rate / the layers' upsampling = " + std::to_string(c.sample_rate) +
              " / " + std::to_string(hop) + " = " + num(static_cast<double>(c.sample_rate) / hop) +
              ", found " + num(c.frame_rate));
}

// A day of audio at 12.5 frames a second: longer streams are no stream (and their chunk lists
// would not fit in memory).
constexpr int MAX_STREAM_FRAMES = 1 << 20;

void validate_schedule(const PipelineConfig& p, const std::string& origin) {
  const PipelineSchedule& s = p.schedule;
  for (auto [v, field, min] : {std::tuple{s.prompt_tokens, "prompt_tokens", 1},
                               {s.stream_frames, "stream_frames", 1},
                               {s.frames_per_step, "frames_per_step", 1},
                               {s.delay_steps, "delay_steps", 0},
                               {s.first_chunk_frames, "first_chunk_frames", 1},
                               {s.chunk_frames, "chunk_frames", 1},
                               {s.lookahead_steps, "lookahead_steps", 0}})
    require(v >= min, origin, std::string("schedule.") + field,
            "expected >= " + std::to_string(min) + ", found " + std::to_string(v));
  require(s.stream_frames <= MAX_STREAM_FRAMES, origin, "schedule.stream_frames",
          "expected at most " + std::to_string(MAX_STREAM_FRAMES) + ", found " +
              std::to_string(s.stream_frames));
  require(s.stream_frames % s.frames_per_step == 0, origin, "schedule.stream_frames",
          "expected a multiple of frames_per_step (" + std::to_string(s.frames_per_step) +
              "), found " + std::to_string(s.stream_frames));
  for (auto [v, field] : {std::pair{s.first_chunk_frames, "first_chunk_frames"},
                          std::pair{s.chunk_frames, "chunk_frames"}})
    require(v <= s.stream_frames, origin, std::string("schedule.") + field,
            "expected <= stream_frames (" + std::to_string(s.stream_frames) +
                "): a chunk longer than the stream, found " + std::to_string(v));
  const int left = codec_left_context_frames(p.codec);
  const int ctx = p.codec.context_frames;
  require(s.first_chunk_frames <= ctx, origin, "schedule.first_chunk_frames",
          "expected <= stages[2].context_frames (" + std::to_string(ctx) +
              "): a chunk longer than the context, found " + std::to_string(s.first_chunk_frames));
  if (s.stream_frames > s.first_chunk_frames)
    require(s.chunk_frames + left <= ctx, origin, "schedule.chunk_frames",
            "expected <= stages[2].context_frames - the codec's left context (" +
                std::to_string(ctx) + " - " + std::to_string(left) + " = " +
                std::to_string(ctx - left) + " frames): a chunk longer than the context, found " +
                std::to_string(s.chunk_frames));
  const int64_t positions = int64_t{s.prompt_tokens} + s.stream_frames;
  require(positions <= p.producer.max_position_embeddings, origin, "schedule.stream_frames",
          "expected prompt_tokens + stream_frames <= stages[0].model.max_position_embeddings (" +
              std::to_string(p.producer.max_position_embeddings) + "), found " +
              std::to_string(positions));
  const int steps = producer_steps(s);
  const int ready = frame_ready_step(s, s.first_chunk_frames - 1);
  require(ready + s.lookahead_steps <= steps, origin, "schedule.lookahead_steps",
          "expected <= " + std::to_string(steps - ready) + " (the stream's " +
              std::to_string(steps) + " producer steps after step " + std::to_string(ready) +
              ", which completes the first chunk): a lookahead beyond the stream, found " +
              std::to_string(s.lookahead_steps));
}

}  // namespace

void validate_pipeline(const PipelineConfig& p, const std::string& origin) {
  validate_stages(p, origin);
  validate_schedule(p, origin);
}

}  // namespace megaops
