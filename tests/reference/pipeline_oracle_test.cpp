// The whole pipeline on the CPU oracle: streamed output equals non-streamed output (every chunk
// decoded from its window, left context included, against one codec call over the whole stream),
// chunks come out in order and the first not before producer step h, the local transformer's
// codes are its per-codebook head slices' argmaxes, and the random audio is finite and not zero.
#include "reference/pipeline_oracle.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "models/pipeline_json.h"
#include "pipeline/stream.h"
#include "reference/codec_ops.h"

namespace megaops {
namespace {

PipelineConfig tiny() {
  return read_pipeline(std::string(MEGAOPS_SOURCE_DIR) + "/tests/fixtures/pipelines/tiny.json");
}

TEST(PipelineOracle, StreamedEqualsNonStreamed) {
  for (auto [delay, frames_per_step, first, chunk] :
       {std::tuple{1, 1, 3, 4}, {0, 2, 2, 3}, {2, 1, 5, 1}, {0, 3, 9, 4}}) {
    PipelineConfig p = tiny();
    p.schedule.delay_steps = delay;
    p.schedule.frames_per_step = frames_per_step;
    p.schedule.first_chunk_frames = first;
    p.schedule.chunk_frames = chunk;
    p.schedule.lookahead_steps = 0;
    validate_pipeline(p, "test");
    const int batch = 3;
    const auto prompts = pipeline_prompts(p, batch, 11);
    ref::PipelineOracle streamed(p, 5, batch), whole(p, 5, batch);
    StreamSamples got(batch);
    int expect_index = 0;
    const StreamTimes times = stream_pipeline(
        p, streamed, prompts, [&](const StreamChunkEvent& e, const StreamSamples& s) {
          EXPECT_EQ(e.index, expect_index++);
          ASSERT_EQ(s.size(), static_cast<size_t>(batch));
          for (int b = 0; b < batch; ++b) got[b].insert(got[b].end(), s[b].begin(), s[b].end());
        });
    StreamCodes codes;
    const StreamSamples want = run_pipeline_whole(p, whole, prompts, &codes);
    EXPECT_EQ(times.codes, codes);
    const int hop = codec_hop(p.codec);
    for (int b = 0; b < batch; ++b) {
      ASSERT_EQ(got[b].size(), static_cast<size_t>(p.schedule.stream_frames) * hop);
      ASSERT_EQ(want[b].size(), got[b].size());
      double energy = 0;
      for (size_t i = 0; i < got[b].size(); ++i) {
        // Bit for bit: the same terms in the same order (reference/codec_ops.h).
        ASSERT_EQ(got[b][i], want[b][i])
            << "stream " << b << " sample " << i << " delay " << delay << " F " << frames_per_step;
        ASSERT_TRUE(std::isfinite(got[b][i]));
        energy += double(got[b][i]) * got[b][i];
      }
      EXPECT_GT(energy, 0.0);
    }
  }
}

TEST(PipelineOracle, FirstChunkWaitsForStepH) {
  const PipelineConfig p = tiny();  // delay 1, first chunk 3 frames: ready at step 4, h = 5
  ASSERT_EQ(publication_step(p), 5);
  ref::PipelineOracle st(p, 1, 1);
  const StreamTimes t = stream_pipeline(p, st, pipeline_prompts(p, 1, 2), {});
  ASSERT_EQ(t.chunks.size(), stream_chunks(p).size());
  EXPECT_EQ(t.step_h, 5);
  ASSERT_EQ(t.step_done_s.size(), 12u);
  EXPECT_GE(t.chunks[0].published_s, t.step_done_s[4]);
  EXPECT_LE(t.chunks[0].decoded_s, t.step_done_s[4]);  // decoded after step 4, held until 5
  for (size_t i = 1; i < t.chunks.size(); ++i) {
    EXPECT_GE(t.chunks[i].published_s, t.chunks[i - 1].published_s);
    EXPECT_GE(t.chunks[i].published_s, t.step_done_s[t.chunks[i].chunk.ready_step - 1]);
  }
}

TEST(PipelineOracle, LocalTransformerTakesItsHeadSlices) {
  const PipelineConfig p = tiny();
  ref::PipelineOracle st(p, 3, 2);
  const StreamCodes frame = st.local_frame({7, 100});
  // Recompute stream 1's frame with the model directly.
  const ref::Weights w = ref::random_weights(p.local.model, 3 + 1);
  ref::Model m(w, p.local.codebooks);
  const int c = p.local.codebook_size;
  ASSERT_EQ(frame[1].size(), 4u);
  EXPECT_EQ(frame[1][0], 100);
  int token = 100;
  for (int q = 1; q < p.local.codebooks; ++q) {
    const std::vector<float> logits = m.forward({token});
    EXPECT_EQ(frame[1][q], ref::codebook_argmax(logits.data(), q, c)) << q;
    EXPECT_GE(frame[1][q], 0);
    EXPECT_LT(frame[1][q], c);
    token = q * c + frame[1][q];
  }
}

TEST(PipelineOracle, CodecRejectsBadCodes) {
  const PipelineConfig p = tiny();
  ref::CodecDecoder codec(p.codec, 1);
  std::vector<int32_t> codes(4 * 2, 0);
  codes[3] = 128;
  EXPECT_THROW(codec.decode(codes, 2), InputError);
  EXPECT_THROW(codec.decode(std::vector<int32_t>(7, 0), 2), InputError);
}

}  // namespace
}  // namespace megaops
