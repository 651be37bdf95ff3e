// The GPU stages of a streaming pipeline (runtime/pipeline_stages.h) under the streaming driver:
// every code is in its codebook, the audio is the CPU codec oracle's audio of the GPU's codes (the
// handoff between the stages is right), the streamed audio equals one codec call over the whole
// stream, the first chunk waits for producer step h, and every runnable composition of the
// producer and local transformer runs. The example pipelines run end to end at batch 1 and 64.
#include <gtest/gtest.h>

#include <cmath>

#include "gpu_test_util.h"
#include "graph/pipeline_composition.h"
#include "models/pipeline_json.h"
#include "models/step_graph.h"
#include "reference/pipeline_oracle.h"
#include "runtime/pipeline_stages.h"

namespace megaops {
namespace {

using testing::rel_error;

PipelineConfig pipeline(const std::string& rel) {
  return read_pipeline(std::string(MEGAOPS_SOURCE_DIR) + "/" + rel);
}

GpuPipelineOptions options(int batch, uint64_t seed) {
  GpuPipelineOptions o;
  o.step_graph = build_step_graph;
  o.max_batch = batch;
  o.seed = seed;
  o.codec_fast_engines = false;
  return o;
}

StreamSamples concat(const std::vector<StreamSamples>& parts) {
  StreamSamples out(parts.front().size());
  for (const StreamSamples& p : parts)
    for (size_t b = 0; b < p.size(); ++b) out[b].insert(out[b].end(), p[b].begin(), p[b].end());
  return out;
}

TEST(PipelineStreamGpu, TinyStreamsTheOraclesAudioOfItsCodes) {
  MEGAOPS_REQUIRE_GPU();
  const PipelineConfig p = pipeline("tests/fixtures/pipelines/tiny.json");
  const int batch = 3;
  GpuPipelineOptions o = options(batch, 21);
  o.codec_max_frames = p.schedule.stream_frames;  // the whole stream in one call, below
  auto gpu = make_gpu_pipeline_stages(p, o);
  const auto prompts = pipeline_prompts(p, batch, 4);
  std::vector<StreamSamples> parts;
  const StreamTimes t =
      stream_pipeline(p, *gpu, prompts,
                      [&](const StreamChunkEvent&, const StreamSamples& s) { parts.push_back(s); });
  ASSERT_EQ(parts.size(), stream_chunks(p).size());
  EXPECT_GE(t.chunks[0].published_s, t.step_done_s.at(t.step_h - 1));
  const StreamSamples streamed = concat(parts);
  for (const auto& codes : t.codes)
    for (size_t i = 0; i < codes.size(); ++i) {
      ASSERT_GE(codes[i], 0);
      ASSERT_LT(codes[i], p.local.codebook_size);
    }
  // The CPU codec on the GPU's codes.
  const ref::CodecDecoder cpu(p.codec, 21 + 2);
  for (int b = 0; b < batch; ++b) {
    const std::vector<float> want = cpu.decode(t.codes[b], p.schedule.stream_frames);
    ASSERT_EQ(streamed[b].size(), want.size());
    EXPECT_LE(rel_error(streamed[b].data(), want.data(), want.size()), 1e-4) << "stream " << b;
  }
  // Streamed against whole on the GPU (the same greedy codes: the stages are deterministic).
  StreamCodes codes;
  const StreamSamples whole = run_pipeline_whole(p, *gpu, prompts, &codes);
  EXPECT_EQ(codes, t.codes);
  for (int b = 0; b < batch; ++b)
    EXPECT_LE(rel_error(streamed[b].data(), whole[b].data(), whole[b].size()), 1e-4);
}

TEST(PipelineStreamGpu, EveryRunnableCompositionRuns) {
  MEGAOPS_REQUIRE_GPU();
  const PipelineConfig p = pipeline("tests/fixtures/pipelines/tiny.json");
  const auto prompts = pipeline_prompts(p, 2, 8);
  for (const char* producer : {"conventional", "conventional_pdl", "pdl_chain"})
    for (const char* local : {"conventional", "conventional_pdl", "pdl_chain"}) {
      PipelineComposition c = default_composition();
      c.regions[1].backend = producer;
      c.regions[2].backend = local;
      const StagePlans plans = composition_stage_plans(c, "test");
      GpuPipelineOptions o = options(2, 3);
      o.producer_plan = plans.producer;
      o.local_plan = plans.local;
      auto gpu = make_gpu_pipeline_stages(p, o);
      std::vector<StreamSamples> parts;
      const StreamTimes t = stream_pipeline(
          p, *gpu, prompts,
          [&](const StreamChunkEvent&, const StreamSamples& s) { parts.push_back(s); });
      const StreamSamples audio = concat(parts);
      for (const auto& s : audio) {
        ASSERT_EQ(s.size(), static_cast<size_t>(p.schedule.stream_frames) * codec_hop(p.codec));
        for (float v : s) ASSERT_TRUE(std::isfinite(v));
      }
      EXPECT_GT(stream_rtfx(p, t.total_s), 0) << producer << " " << local;
    }
}

TEST(PipelineStreamGpu, ExamplePipelinesStream) {
  MEGAOPS_REQUIRE_GPU();
  for (const char* f :
       {"bench/pipelines/tts-0.6b-mimi.json", "bench/pipelines/tts-1.7b-snake.json"})
    for (int batch : {1, 64}) {
      PipelineConfig p = pipeline(f);
      p.schedule.stream_frames = 16;  // a short stream: the test checks it runs, bench times it
      validate_pipeline(p, f);
      GpuPipelineOptions o = options(batch, 1);
      o.codec_fast_engines = true;
      auto gpu = make_gpu_pipeline_stages(p, o);
      double energy = 0;
      const StreamTimes t = stream_pipeline(p, *gpu, pipeline_prompts(p, batch, 2),
                                            [&](const StreamChunkEvent&, const StreamSamples& s) {
                                              for (const auto& x : s)
                                                for (float v : x) {
                                                  ASSERT_TRUE(std::isfinite(v));
                                                  energy += double(v) * v;
                                                }
                                            });
      EXPECT_GT(energy, 0) << f << " batch " << batch;
      std::printf("%s batch %d: T_pub %.3f ms, %zu chunks, %.3f s\n", f, batch,
                  t.chunks[0].published_s * 1e3, t.chunks.size(), t.total_s);
    }
}

}  // namespace
}  // namespace megaops
