// A streaming pipeline in the shape of codec-based text-to-speech (Qwen3-TTS, Moshi/Mimi, NH-TTS):
// a producer (a Llama 3 / Qwen 3 decoder whose head emits the codebook-0 code of one frame per
// step), a local transformer (a small decoder run autoregressively over the other codebooks of
// that frame, one embedding table and one head slice per codebook) and a codec decoder (residual
// VQ decode, causal 1-D convolutions, transposed convolutions and activations, to waveform
// samples), joined by chunk buffers under a streaming schedule. Plain data and the schedule's
// arithmetic: models/pipeline_json.h reads a pipeline file into it, models/codec_graph.h builds
// the stages' op graphs, reference/pipeline_oracle.h runs it on the CPU, pipeline/ streams it.
// docs/pipeline-format.md documents every field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/model_config.h"
#include "graph/op_graph.h"

namespace megaops {

constexpr const char* PIPELINE_SCHEMA = "megaops-pipeline/1";

// One layer of the codec decoder as the file writes it. Convolutions are causal: a conv1d pads
// (kernel - 1) * dilation zeros on the left; a transposed conv keeps the first T * stride samples
// of its (T - 1) * stride + kernel (all trimming on the right, as Mimi / EnCodec with
// trim_right_ratio 1). A residual block adds its body's output to its input.
enum class CodecLayerKind { Conv1d, ConvTranspose1d, Elu, Snake, Residual };
const char* codec_layer_kind_name(CodecLayerKind k);  // "conv1d", ..., "residual"

struct CodecLayer {
  CodecLayerKind kind = CodecLayerKind::Conv1d;
  int in_channels = 0, out_channels = 0;  // activations and residual blocks: the channels they see
  int kernel = 1, stride = 1, dilation = 1;
  std::vector<CodecLayer> body;  // Residual only
};

struct CodecConfig {
  int codebooks = 0, codebook_size = 0, codebook_dim = 0;
  int sample_rate = 0;     // output samples per second
  double frame_rate = 0;   // frames per second: sample_rate / the layers' total upsampling
  int context_frames = 0;  // most frames one decode call takes: left context + new frames
  std::vector<CodecLayer> layers;
};

// The codec decoder flattened into the op list every implementation runs in order (the CPU
// oracle, the GPU decoder, the op graph): op 0 is the codebook embedding; op i reads op i - 1's
// output, and a residual add also the output of op `skip` (the block's input).
struct CodecOp {
  OpCode code = OpCode::CodebookEmbed;
  int in_channels = 0, out_channels = 0;
  int kernel = 1, stride = 1, dilation = 1;
  int rate_in = 1;  // input samples per frame (1 at the codes); output: rate_in * stride
  int skip = -1;    // ResidualAdd: the op whose output the block started from
  int weight = -1;  // index of its first tensor in codec_weight_specs (-1: none)
};
std::vector<CodecOp> codec_ops(const CodecConfig& c);

// Output samples per frame (the product of the transposed convolutions' strides).
int codec_hop(const CodecConfig& c);

// Frames of left context a decode call needs so that its new frames' samples equal those of one
// call over the whole stream: the sum over ops of how far back one output sample reaches, in
// frames, rounded up. A conv1d reaches (kernel - 1) * dilation input samples, a transposed conv
// (kernel - 1) output samples.
int codec_left_context_frames(const CodecConfig& c);

// The codec's weights, in a stable order: "codec.codebooks" [codebooks, codebook_size,
// codebook_dim]; per conv op i "codec.ops.<i>.conv1d.weight" [out, in, kernel] or
// "codec.ops.<i>.conv_transpose1d.weight" [in, out, kernel] (PyTorch's layouts) and
// "codec.ops.<i>.<code>.bias" [out]; per snake op "codec.ops.<i>.snake.alpha" and ".beta"
// [channels].
std::vector<WeightSpec> codec_weight_specs(const CodecConfig& c);

// Deterministic random values of codec weight `spec` (index `tensor_index` of codec_weight_specs)
// for `seed`, any slice [begin, begin + count): convolutions uniform with std 1/sqrt(in * kernel)
// (a transposed conv's 2 * in: its kernel is twice its stride; the signal keeps
// its scale through the stack), biases std 0.01, codebooks std
// 1/sqrt(codebooks) (their sum has unit scale), snake alpha and beta 1 +- 0.1.
void codec_weight_values(const WeightSpec& spec, uint32_t tensor_index, uint64_t seed, size_t begin,
                         size_t count, float* out);

// The local transformer: a decoder over one frame. Its vocabulary is codebooks x codebook_size:
// rows [q * C, (q + 1) * C) of its embedding table embed codebook q's codes and the same rows of
// its head are codebook q's head. Per frame it runs codebooks - 1 tokens: codebook q - 1's code
// in (codebook 0's from the producer), codebook q's code out (the argmax of its head slice).
struct LocalTransformerConfig {
  ModelConfig model;
  int codebooks = 0, codebook_size = 0;
};

// The streaming schedule (docs/pipeline-format.md). Producer step s = 1..steps emits frames
// [(s - 1) F, s F) (step 1 is the prefill of the prompt and, for F > 1, F - 1 decode steps); a
// frame enters the chunk buffer delay_steps steps after the step that emitted it (an acoustic
// delay, as Moshi's; at the end of the stream every frame is flushed after the last step). Chunk
// 1 holds the first first_chunk_frames frames, every later chunk chunk_frames (the last may be
// shorter). The first chunk is published at T_pub = max(F(chunk 1 decoded), F(producer step h))
// with h = the step that completes chunk 1 + lookahead_steps: a further producer step shows that
// the stream goes on.
struct PipelineSchedule {
  int prompt_tokens = 16;
  int stream_frames = 64;
  int frames_per_step = 1;
  int delay_steps = 0;
  int first_chunk_frames = 4;
  int chunk_frames = 8;
  int lookahead_steps = 1;
};

struct PipelineConfig {
  std::string name;
  std::vector<std::string> sources;  // where the shapes come from (informational)
  ModelConfig producer;
  LocalTransformerConfig local;
  CodecConfig codec;
  PipelineSchedule schedule;
};

// Checks what ties the stages together and the schedule; throws InputError "<origin>: <field>:
// expected ..., found ..." naming the field as the pipeline file spells it (stages[0] is the
// producer, stages[1] the local transformer, stages[2] the codec decoder).
void validate_pipeline(const PipelineConfig& p, const std::string& origin);

// Producer steps of the stream (stream_frames / frames_per_step).
int producer_steps(const PipelineSchedule& s);
// The producer step (1-based) that emits frame f, and the one after which it is in the buffer.
int frame_step(const PipelineSchedule& s, int frame);
int frame_ready_step(const PipelineSchedule& s, int frame);

// One chunk of the stream: frames [first_frame, end_frame), in the buffer after producer step
// ready_step, decoded from frames [window_first, end_frame) (its left context included).
struct StreamChunk {
  int first_frame = 0, end_frame = 0;
  int ready_step = 0;
  int window_first = 0;
};
std::vector<StreamChunk> stream_chunks(const PipelineConfig& p);

// h: the producer step the first publication waits for.
int publication_step(const PipelineConfig& p);

// The op graphs of a pipeline's groups at one batch size, what the planner composes
// (models/codec_graph.h builds them): the producer's prompt (prefill), one producer decode step,
// one local transformer step (codebooks - 1 of them a frame) and the codec over the first
// chunk's window and over a later chunk's window.
struct PipelineGraphs {
  OpGraph prefill, producer_step, local_step, codec_first, codec_chunk;
};

}  // namespace megaops
