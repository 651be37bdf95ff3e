// The streaming driver: runs a pipeline's stages (producer, local transformer, codec decoder,
// graph/pipeline.h) for a batch of streams under the pipeline's schedule, joined by a chunk
// buffer of frames, and publishes each chunk of waveform samples as soon as it is decoded (the
// first one not before producer step h: T_pub = max(F(chunk 1 decoded), F(producer step h))).
// The stages are an interface with two implementations: the CPU oracle
// (reference/pipeline_oracle.h) and the GPU one (runtime/pipeline_stages.h); the driver is the
// one streaming loop both run, serially (a chunk is decoded between two producer steps).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "graph/pipeline.h"

namespace megaops {

// Codes of one frame or window: [stream][frame * codebooks + codebook].
using StreamCodes = std::vector<std::vector<int32_t>>;
// Waveform samples: [stream][sample].
using StreamSamples = std::vector<std::vector<float>>;

class PipelineStages {
 public:
  virtual ~PipelineStages() = default;
  // Starts the streams: runs each prompt (one per stream) through the producer and returns each
  // stream's codebook-0 code of frame 0 (greedy).
  virtual std::vector<int> producer_prefill(const std::vector<std::vector<int>>& prompts) = 0;
  // One producer decode step, fed the codes it emitted last: each stream's next codebook-0 code.
  virtual std::vector<int> producer_step() = 0;
  // The local transformer over one frame: every codebook's code, [stream][codebook], from the
  // frame's codebook-0 codes.
  virtual StreamCodes local_frame(const std::vector<int>& code0) = 0;
  // The codec decoder over `frames` frames of every stream (codes [stream][frame * codebooks +
  // q]); returns the samples of its frames from `skip_frames` on (the ones before are left
  // context).
  virtual StreamSamples codec_window(const StreamCodes& codes, int frames, int skip_frames) = 0;
  // "cpu oracle", "cuda ..." (for reports).
  virtual std::string backend() const = 0;
};

// Deterministic prompts: `batch` prompts of schedule.prompt_tokens codebook-0 codes each, a
// function of (seed, stream, index) only.
std::vector<std::vector<int>> pipeline_prompts(const PipelineConfig& p, int batch, uint64_t seed);

// One published chunk. Times in seconds since the stream started (before the prefill).
struct StreamChunkEvent {
  int index = 0;  // 0-based
  StreamChunk chunk;
  double decoded_s = 0;    // its codec window finished
  double published_s = 0;  // handed to the consumer (chunk 0: not before producer step h)
};

struct StreamTimes {
  std::vector<StreamChunkEvent> chunks;
  std::vector<double> step_done_s;  // producer step s (1-based) done: index s - 1
  int step_h = 0;
  double total_s = 0;
  StreamCodes codes;  // every frame's codes, [stream][frame * codebooks + q]
};

using ChunkCallback = std::function<void(const StreamChunkEvent&, const StreamSamples&)>;

// Streams the pipeline for prompts.size() streams (1..64): producer steps (each with the local
// transformer over its frames), and after each step every chunk whose frames are in the buffer
// decoded from its window (left context included) and published through `on_chunk` in order.
// Throws InputError on a batch outside 1..64 and whatever the stages throw.
StreamTimes stream_pipeline(const PipelineConfig& p, PipelineStages& stages,
                            const std::vector<std::vector<int>>& prompts,
                            const ChunkCallback& on_chunk);

// The same frames decoded in one codec call over the whole stream (the non-streamed reference):
// [stream][stream_frames * hop samples]. `codes_out` (may be null) gets the codes.
StreamSamples run_pipeline_whole(const PipelineConfig& p, PipelineStages& stages,
                                 const std::vector<std::vector<int>>& prompts,
                                 StreamCodes* codes_out = nullptr);

// Real-time factor: seconds of audio per stream over wall seconds.
double stream_rtfx(const PipelineConfig& p, double wall_s);
// Its steady state: the audio after the first chunk over the time from its publication to the
// last chunk's (stream_rtfx of the whole stream when it is one chunk).
double steady_rtfx(const PipelineConfig& p, const StreamTimes& t);

}  // namespace megaops
