// The GPU codec decoder (runtime/codec_decoder.h) against the CPU oracle's (reference/
// pipeline_oracle.h, CodecDecoder) on the tiny pipeline and on the example pipelines' codecs
// (Mimi's decoder convolutions, the Qwen3-TTS tokenizer's SnakeBeta vocoder), and streamed against
// whole on the GPU: every chunk's window decoded with its left context gives the samples of one
// call over the whole stream. Tolerances: fp32 engines 1e-4 relative over a whole decoder (DESIGN:
// fp32 vs fp32), fast engines (TF32, FFT, Winograd) 2e-2; windows vs whole 1e-4 (cuDNN may pick
// another algorithm for another length).
#include <gtest/gtest.h>

#include <random>

#include "gpu_test_util.h"
#include "models/pipeline_json.h"
#include "reference/pipeline_oracle.h"
#include "runtime/codec_decoder.h"

namespace megaops {
namespace {

using testing::rel_error;

PipelineConfig pipeline(const std::string& rel) {
  return read_pipeline(std::string(MEGAOPS_SOURCE_DIR) + "/" + rel);
}

StreamCodes random_codes(const CodecConfig& c, int batch, int frames, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> pick(0, c.codebook_size - 1);
  StreamCodes codes(batch, std::vector<int32_t>(static_cast<size_t>(frames) * c.codebooks));
  for (auto& s : codes)
    for (int32_t& v : s) v = pick(rng);
  return codes;
}

// The GPU decoder with exact fp32 engines (<= 1e-4) and with fast ones allowed (<= 2e-2) against
// one CPU decode of the same random codes.
void expect_matches_oracle(const CodecConfig& c, int batch, int frames) {
  std::mt19937_64 rng(testing::test_seed());
  const StreamCodes codes = random_codes(c, batch, frames, rng);
  const ref::CodecDecoder cpu(c, 5);
  StreamSamples want;
  for (int b = 0; b < batch; ++b) want.push_back(cpu.decode(codes[b], frames));
  for (bool fast : {false, true}) {
    CodecDecoderGpu gpu(c, 5, batch, frames, fast);
    const StreamSamples got = gpu.decode(codes, frames, 0);
    ASSERT_EQ(got.size(), static_cast<size_t>(batch));
    for (int b = 0; b < batch; ++b) {
      ASSERT_EQ(got[b].size(), want[b].size());
      EXPECT_LE(rel_error(got[b].data(), want[b].data(), want[b].size()), fast ? 2e-2 : 1e-4)
          << "stream " << b << (fast ? " (fast engines)" : "");
    }
    if (!fast) EXPECT_FALSE(gpu.any_fast_engine());
  }
}

TEST(CodecDecoderGpu, TinyMatchesOracle) {
  MEGAOPS_REQUIRE_GPU();
  expect_matches_oracle(pipeline("tests/fixtures/pipelines/tiny.json").codec, 3, 10);
}

TEST(CodecDecoderGpu, ExampleCodecsMatchOracle) {
  MEGAOPS_REQUIRE_GPU();
  // Two frames of one stream (3840 samples) through every layer of the real shapes; the CPU
  // oracle takes ~10 s for the SnakeBeta vocoder.
  for (const char* f :
       {"bench/pipelines/tts-0.6b-mimi.json", "bench/pipelines/tts-1.7b-snake.json"})
    expect_matches_oracle(pipeline(f).codec, 1, 2);
}

TEST(CodecDecoderGpu, StreamedWindowsMatchWholeStream) {
  MEGAOPS_REQUIRE_GPU();
  const PipelineConfig p = pipeline("tests/fixtures/pipelines/tiny.json");
  std::mt19937_64 rng(testing::test_seed() + 1);
  const int batch = 4, frames = p.schedule.stream_frames, q = p.codec.codebooks;
  const StreamCodes codes = random_codes(p.codec, batch, frames, rng);
  CodecDecoderGpu gpu(p.codec, 9, batch, frames, false);
  const StreamSamples whole = gpu.decode(codes, frames, 0);
  const int hop = codec_hop(p.codec);
  for (const StreamChunk& c : stream_chunks(p)) {
    StreamCodes window(batch);
    for (int b = 0; b < batch; ++b)
      window[b].assign(codes[b].begin() + static_cast<size_t>(c.window_first) * q,
                       codes[b].begin() + static_cast<size_t>(c.end_frame) * q);
    const StreamSamples part =
        gpu.decode(window, c.end_frame - c.window_first, c.first_frame - c.window_first);
    for (int b = 0; b < batch; ++b) {
      ASSERT_EQ(part[b].size(), static_cast<size_t>(c.end_frame - c.first_frame) * hop);
      EXPECT_LE(
          rel_error(part[b].data(), whole[b].data() + static_cast<size_t>(c.first_frame) * hop,
                    part[b].size()),
          1e-4)
          << "chunk at frame " << c.first_frame << " stream " << b;
    }
  }
}

TEST(CodecDecoderGpu, RejectsBadInput) {
  MEGAOPS_REQUIRE_GPU();
  const PipelineConfig p = pipeline("tests/fixtures/pipelines/tiny.json");
  CodecDecoderGpu gpu(p.codec, 1, 2, 4, true);
  StreamCodes codes(1, std::vector<int32_t>(4 * 4, 0));
  codes[0][5] = p.codec.codebook_size;
  EXPECT_THROW(gpu.decode(codes, 4, 0), InputError);
  EXPECT_THROW(gpu.decode(StreamCodes(3, std::vector<int32_t>(16, 0)), 4, 0), InputError);
  EXPECT_THROW(gpu.decode(StreamCodes(1, std::vector<int32_t>(20, 0)), 5, 0), InputError);
  const std::vector<double> us = gpu.time_ops(2, 4, 3);
  EXPECT_EQ(us.size(), codec_ops(p.codec).size());
  for (double t : us) EXPECT_GT(t, 0.0);
}

}  // namespace
}  // namespace megaops
