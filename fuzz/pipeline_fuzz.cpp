// libFuzzer target for pipeline files (models/pipeline_json.h): any text must either yield a
// pipeline whose schedule and codec arithmetic hold (chunks tile the stream in order, every window
// inside the context, h within the stream, the op list ends in one channel at the hop's rate), or
// raise InputError. Anything else is a bug. Seed corpus: fuzz/corpus/pipeline/.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "graph/pipeline.h"
#include "models/pipeline_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  megaops::PipelineConfig p;
  try {
    p = megaops::parse_pipeline(text, "fuzz");
  } catch (const megaops::InputError&) {
    return 0;
  }
  const std::vector<megaops::StreamChunk> chunks = megaops::stream_chunks(p);
  int next = 0;
  for (const megaops::StreamChunk& c : chunks) {
    if (c.first_frame != next || c.end_frame <= c.first_frame || c.window_first > c.first_frame ||
        c.end_frame - c.window_first > p.codec.context_frames || c.ready_step < 1 ||
        c.ready_step > megaops::producer_steps(p.schedule))
      __builtin_trap();
    next = c.end_frame;
  }
  if (next != p.schedule.stream_frames) __builtin_trap();
  if (megaops::publication_step(p) > megaops::producer_steps(p.schedule)) __builtin_trap();
  const std::vector<megaops::CodecOp> ops = megaops::codec_ops(p.codec);
  if (ops.back().out_channels != 1 ||
      ops.back().rate_in * ops.back().stride != megaops::codec_hop(p.codec))
    __builtin_trap();
  return 0;
}
