// See stream.h.
#include "pipeline/stream.h"

#include <chrono>

#include "core/counter_rng.h"
#include "core/error.h"

namespace megaops {

namespace {

void check_batch(size_t batch) {
  if (batch < 1 || batch > 64)
    throw_input_error("stream", "batch", "expected 1..64 streams, found " + std::to_string(batch));
}

// Runs the producer step `s` (1-based): its frames_per_step frames, each through the local
// transformer, appended to codes.
void producer_step(const PipelineConfig& p, PipelineStages& st,
                   const std::vector<std::vector<int>>& prompts, int s, StreamCodes& codes) {
  for (int j = 0; j < p.schedule.frames_per_step; ++j) {
    const std::vector<int> code0 =
        s == 1 && j == 0 ? st.producer_prefill(prompts) : st.producer_step();
    if (code0.size() != prompts.size())
      throw Error("stream: the producer returned " + std::to_string(code0.size()) + " codes for " +
                  std::to_string(prompts.size()) + " streams");
    const StreamCodes frame = st.local_frame(code0);
    for (size_t b = 0; b < codes.size(); ++b) {
      if (frame.at(b).size() != static_cast<size_t>(p.local.codebooks))
        throw Error("stream: the local transformer returned " + std::to_string(frame[b].size()) +
                    " codes for " + std::to_string(p.local.codebooks) + " codebooks");
      codes[b].insert(codes[b].end(), frame[b].begin(), frame[b].end());
    }
  }
}

StreamCodes window_codes(const PipelineConfig& p, const StreamCodes& codes, int first, int end) {
  const int q = p.local.codebooks;
  StreamCodes w(codes.size());
  for (size_t b = 0; b < codes.size(); ++b)
    w[b].assign(codes[b].begin() + static_cast<size_t>(first) * q,
                codes[b].begin() + static_cast<size_t>(end) * q);
  return w;
}

}  // namespace

std::vector<std::vector<int>> pipeline_prompts(const PipelineConfig& p, int batch, uint64_t seed) {
  check_batch(static_cast<size_t>(batch));
  std::vector<std::vector<int>> out(batch);
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < p.schedule.prompt_tokens; ++i)
      out[b].push_back(static_cast<int>(counter_uniform(seed, b, i) * p.producer.vocab_size));
  return out;
}

StreamTimes stream_pipeline(const PipelineConfig& p, PipelineStages& st,
                            const std::vector<std::vector<int>>& prompts,
                            const ChunkCallback& on_chunk) {
  check_batch(prompts.size());
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto now = [&] { return std::chrono::duration<double>(clock::now() - t0).count(); };
  const std::vector<StreamChunk> chunks = stream_chunks(p);
  const int steps = producer_steps(p.schedule);
  StreamTimes out;
  out.step_h = publication_step(p);
  out.codes.resize(prompts.size());
  size_t next = 0;
  bool held = false;  // chunk 0 decoded, waiting for step h
  StreamSamples held_samples;
  auto publish = [&](StreamChunkEvent& e, const StreamSamples& samples) {
    e.published_s = now();
    if (on_chunk) on_chunk(e, samples);
    out.chunks.push_back(e);
  };
  StreamChunkEvent held_event;
  for (int s = 1; s <= steps; ++s) {
    producer_step(p, st, prompts, s, out.codes);
    out.step_done_s.push_back(now());
    if (s == out.step_h && held) {
      publish(held_event, held_samples);
      held = false;
    }
    while (next < chunks.size() && chunks[next].ready_step <= s) {
      const StreamChunk& c = chunks[next];
      StreamChunkEvent e;
      e.index = static_cast<int>(next);
      e.chunk = c;
      StreamSamples samples =
          st.codec_window(window_codes(p, out.codes, c.window_first, c.end_frame),
                          c.end_frame - c.window_first, c.first_frame - c.window_first);
      e.decoded_s = now();
      if (next == 0 && s < out.step_h) {
        held = true;
        held_event = e;
        held_samples = std::move(samples);
      } else {
        publish(e, samples);
      }
      ++next;
    }
  }
  out.total_s = now();
  return out;
}

StreamSamples run_pipeline_whole(const PipelineConfig& p, PipelineStages& st,
                                 const std::vector<std::vector<int>>& prompts,
                                 StreamCodes* codes_out) {
  check_batch(prompts.size());
  StreamCodes codes(prompts.size());
  for (int s = 1; s <= producer_steps(p.schedule); ++s) producer_step(p, st, prompts, s, codes);
  StreamSamples samples = st.codec_window(codes, p.schedule.stream_frames, 0);
  if (codes_out) *codes_out = std::move(codes);
  return samples;
}

double steady_rtfx(const PipelineConfig& p, const StreamTimes& t) {
  if (t.chunks.size() < 2)
    return t.chunks.empty() ? 0.0 : stream_rtfx(p, t.chunks.back().published_s);
  const StreamChunk& first = t.chunks.front().chunk;
  const double audio_s = (p.schedule.stream_frames - first.end_frame) / p.codec.frame_rate;
  const double wall_s = t.chunks.back().published_s - t.chunks.front().published_s;
  return wall_s > 0 ? audio_s / wall_s : 0.0;
}

double stream_rtfx(const PipelineConfig& p, double wall_s) {
  const double audio_s = p.schedule.stream_frames / p.codec.frame_rate;
  return wall_s > 0 ? audio_s / wall_s : 0.0;
}

}  // namespace megaops
