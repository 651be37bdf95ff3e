// The pipeline file reader (models/pipeline_json.h) and the schedule's arithmetic
// (graph/pipeline.h): the fixture and the shipped example pipelines parse into the shapes they
// cite; every broken file ends in one InputError line naming the file and the field.
#include "models/pipeline_json.h"

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/text_file.h"
#include "models/codec_graph.h"

namespace megaops {
namespace {

using nlohmann::json;

std::string source(const std::string& rel) {
  return std::string(MEGAOPS_SOURCE_DIR) + "/" + rel;
}

json tiny_json() {
  return json::parse(read_text_file(source("tests/fixtures/pipelines/tiny.json")));
}

TEST(PipelineJson, TinyParses) {
  const PipelineConfig p = read_pipeline(source("tests/fixtures/pipelines/tiny.json"));
  EXPECT_EQ(p.name, "tiny");
  EXPECT_EQ(p.producer.arch, Arch::Qwen3);
  EXPECT_EQ(p.producer.vocab_size, 128);
  EXPECT_EQ(p.local.codebooks, 4);
  EXPECT_EQ(p.local.model.vocab_size, 512);
  EXPECT_EQ(p.codec.layers.size(), 7u);
  EXPECT_EQ(p.codec.layers[2].kind, CodecLayerKind::Residual);
  EXPECT_EQ(p.codec.layers[2].body.size(), 4u);
  EXPECT_EQ(p.schedule.delay_steps, 1);
  // Flattened: embed, conv, convtr, [elu, conv, elu, conv], add, snake, convtr, elu, conv.
  const std::vector<CodecOp> ops = codec_ops(p.codec);
  ASSERT_EQ(ops.size(), 12u);
  EXPECT_EQ(ops[7].code, OpCode::ResidualAdd);
  EXPECT_EQ(ops[7].skip, 2);  // the transposed conv's output entered the block
  EXPECT_EQ(ops[7].out_channels, 16);
  EXPECT_EQ(ops[9].rate_in, 2);
  EXPECT_EQ(ops[11].rate_in, 6);
  EXPECT_EQ(codec_hop(p.codec), 6);
  // Reach: conv k3 (2 frames) + convtr k4 s2 (3/2) + conv k3 at rate 2 (1) + convtr k6 s3 at
  // rate 2 (5/6) + conv k3 d2 at rate 6 (4/6) = 6 frames.
  EXPECT_EQ(codec_left_context_frames(p.codec), 6);
  const std::vector<WeightSpec> specs = codec_weight_specs(p.codec);
  EXPECT_EQ(specs[0].name, "codec.codebooks");
  EXPECT_EQ(specs[0].shape, (std::vector<int64_t>{4, 128, 16}));
  EXPECT_EQ(specs[3].name, "codec.ops.2.conv_transpose1d.weight");
  EXPECT_EQ(specs[3].shape, (std::vector<int64_t>{32, 16, 4}));
}

TEST(PipelineJson, ScheduleArithmetic) {
  const PipelineConfig p = read_pipeline(source("tests/fixtures/pipelines/tiny.json"));
  EXPECT_EQ(producer_steps(p.schedule), 12);
  EXPECT_EQ(frame_step(p.schedule, 0), 1);
  EXPECT_EQ(frame_ready_step(p.schedule, 0), 2);    // delay 1
  EXPECT_EQ(frame_ready_step(p.schedule, 11), 12);  // flushed at the last step
  const std::vector<StreamChunk> c = stream_chunks(p);
  ASSERT_EQ(c.size(), 4u);  // 3 + 4 + 4 + 1 frames
  EXPECT_EQ(c[0].first_frame, 0);
  EXPECT_EQ(c[0].end_frame, 3);
  EXPECT_EQ(c[0].ready_step, 4);
  EXPECT_EQ(c[0].window_first, 0);
  EXPECT_EQ(c[1].window_first, 0);  // max(0, 3 - 6)
  EXPECT_EQ(c[2].first_frame, 7);
  EXPECT_EQ(c[2].window_first, 1);
  EXPECT_EQ(c[3].end_frame, 12);
  EXPECT_EQ(c[3].ready_step, 12);
  EXPECT_EQ(publication_step(p), 5);
  PipelineConfig q = p;
  q.schedule.frames_per_step = 2;
  q.schedule.delay_steps = 0;
  EXPECT_EQ(producer_steps(q.schedule), 6);
  EXPECT_EQ(frame_step(q.schedule, 3), 2);
  EXPECT_EQ(publication_step(q), 3);  // frame 2 in step 2, + 1
}

TEST(PipelineJson, ExamplePipelinesCiteTheirShapes) {
  const PipelineConfig small = read_pipeline(source("bench/pipelines/tts-0.6b-mimi.json"));
  EXPECT_EQ(small.producer.hidden_size, 1024);
  EXPECT_EQ(small.producer.num_layers, 28);
  EXPECT_EQ(small.local.model.num_layers, 5);
  EXPECT_EQ(small.local.codebooks, 16);
  EXPECT_EQ(codec_hop(small.codec), 1920);
  EXPECT_EQ(small.codec.sample_rate, 24000);
  const PipelineConfig large = read_pipeline(source("bench/pipelines/tts-1.7b-snake.json"));
  EXPECT_EQ(large.producer.hidden_size, 2048);
  EXPECT_EQ(large.producer.intermediate_size, 6144);
  EXPECT_EQ(codec_hop(large.codec), 1920);
  EXPECT_FALSE(large.sources.empty());
  for (const PipelineConfig* p : {&small, &large}) {
    const PipelineGraphs g = build_pipeline_graphs(*p, 8);
    EXPECT_EQ(g.producer_step.batch, 8);
    EXPECT_GT(g.codec_chunk.total_flops(), g.codec_first.total_flops() * 0.5);
    EXPECT_EQ(g.codec_first.ops.size(), codec_ops(p->codec).size());
  }
}

struct BadCase {
  std::string name;
  std::function<void(json&)> edit;
  std::vector<std::string> must_mention;
};

void PrintTo(const BadCase& c, std::ostream* os) {
  *os << c.name;
}

class PipelineJsonBad : public ::testing::TestWithParam<BadCase> {};

TEST_P(PipelineJsonBad, OneLineNamingTheField) {
  json j = tiny_json();
  GetParam().edit(j);
  try {
    parse_pipeline(j.dump(2), "p.json");
    FAIL() << "accepted";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_EQ(msg.rfind("p.json: ", 0), 0u) << msg;
    for (const std::string& s : GetParam().must_mention)
      EXPECT_NE(msg.find(s), std::string::npos) << msg << "\n  should mention " << s;
  }
}

json& layers(json& j) {
  return j["stages"][2]["layers"];
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PipelineJsonBad,
    ::testing::Values(
        BadCase{"unknown_stage",
                [](json& j) { j["stages"][1]["type"] = "vocoder"; },
                {"stages[1].type", "vocoder", "local_transformer"}},
        BadCase{"stages_out_of_order",
                [](json& j) { std::swap(j["stages"][1], j["stages"][2]); },
                {"stages[1].type", "codec_decoder", "in this order"}},
        BadCase{"missing_stage",
                [](json& j) { j["stages"].erase(2); },
                {"stages", "expected 3 stages", "found 2"}},
        BadCase{"unknown_layer_field",
                [](json& j) { layers(j)[0]["kernal"] = 3; },
                {"stages[2].layers[0].kernal", "unknown field"}},
        BadCase{"unknown_top_field",
                [](json& j) { j["schedulee"] = 1; },
                {"schedulee", "unknown field"}},
        BadCase{"unknown_layer_op",
                [](json& j) { layers(j)[3]["op"] = "gelu"; },
                {"stages[2].layers[3].op", "gelu"}},
        BadCase{"codebooks_between_stages",
                [](json& j) { j["stages"][2]["codebooks"] = 8; },
                {"stages[2].codebooks", "expected 4", "stages[1].codebooks", "found 8"}},
        BadCase{"producer_head_vs_codebook",
                [](json& j) { j["stages"][0]["model"]["vocab_size"] = 256; },
                {"stages[0].model.vocab_size", "expected 128", "found 256"}},
        BadCase{"local_vocab",
                [](json& j) { j["stages"][1]["model"]["vocab_size"] = 500; },
                {"stages[1].model.vocab_size", "expected 512", "found 500"}},
        BadCase{"layer_channels",
                [](json& j) { layers(j)[1]["in"] = 16; },
                {"stages[2].layers[1].in", "expected 32", "found 16"}},
        BadCase{"nested_layer_channels",
                [](json& j) { layers(j)[2]["layers"][3]["in"] = 4; },
                {"stages[2].layers[2].layers[3].in", "expected 8", "found 4"}},
        BadCase{"residual_channels",
                [](json& j) { layers(j)[2]["layers"][3]["out"] = 8; },
                {"stages[2].layers[2].layers", "16 input channels", "found 8"}},
        BadCase{"not_mono",
                [](json& j) { layers(j)[6]["out"] = 2; },
                {"stages[2].layers", "1 channel", "found 2"}},
        BadCase{"frame_rate",
                [](json& j) { j["stages"][2]["frame_rate"] = 50; },
                {"stages[2].frame_rate", "600 / 6 = 100", "found 50"}},
        BadCase{"chunk_longer_than_context",
                [](json& j) { j["schedule"]["chunk_frames"] = 5; },
                {"schedule.chunk_frames", "context_frames", "10 - 6 = 4", "longer than the context",
                 "found 5"}},
        BadCase{"first_chunk_longer_than_context",
                [](json& j) { j["stages"][2]["context_frames"] = 2; },
                {"schedule.first_chunk_frames", "longer than the context", "found 3"}},
        BadCase{"chunk_longer_than_stream",
                [](json& j) { j["schedule"]["first_chunk_frames"] = 13; },
                {"schedule.first_chunk_frames", "stream_frames (12)", "found 13"}},
        BadCase{"lookahead_beyond_stream",
                [](json& j) { j["schedule"]["lookahead_steps"] = 9; },
                {"schedule.lookahead_steps", "expected <= 8", "beyond the stream", "found 9"}},
        BadCase{"stream_beyond_producer_context",
                [](json& j) { j["stages"][0]["model"]["max_position_embeddings"] = 16; },
                {"schedule.stream_frames", "max_position_embeddings (16)", "found 17"}},
        BadCase{"frames_per_step_divides",
                [](json& j) { j["schedule"]["frames_per_step"] = 5; },
                {"schedule.stream_frames", "multiple of frames_per_step (5)"}},
        BadCase{"negative_delay",
                [](json& j) { j["schedule"]["delay_steps"] = -1; },
                {"schedule.delay_steps", ">= 0", "-1"}},
        BadCase{"missing_schedule_field",
                [](json& j) { j["schedule"].erase("chunk_frames"); },
                {"schedule.chunk_frames", "missing"}},
        BadCase{"schema",
                [](json& j) { j["schema"] = "megaops-pipeline/2"; },
                {"schema", "megaops-pipeline/1"}},
        BadCase{"model_field",
                [](json& j) { j["stages"][0]["model"].erase("hidden_size"); },
                {"stages[0].model", "hidden_size", "missing"}},
        BadCase{"convtr_kernel",
                [](json& j) { layers(j)[1]["kernel"] = 1; },
                {"stages[2].layers[1].kernel", ">= stride"}},
        BadCase{"string_for_int",
                [](json& j) { j["stages"][2]["codebook_dim"] = "16"; },
                {"stages[2].codebook_dim", "integer"}},
        BadCase{"upsampling_inside_residual",
                [](json& j) {
                  layers(j)[2]["layers"][1] = {
                      {"op", "conv_transpose1d"}, {"in", 16}, {"out", 8}, {"kernel", 2}, {"stride", 2}};
                },
                {"stages[2].layers[2].layers", "keep the sample rate"}},
        BadCase{"huge_stride", [](json& j) { layers(j)[1]["stride"] = 1 << 20; },
                {"stages[2].layers[1].stride", "at most 65536"}},
        BadCase{"huge_upsampling",
                [](json& j) {
                  for (int i = 0; i < 3; ++i)
                    layers(j).insert(layers(j).begin() + 1,
                                     json{{"op", "conv_transpose1d"}, {"in", 32}, {"out", 32},
                                          {"kernel", 4096}, {"stride", 4096}});
                },
                {"stages[2].layers", "upsampling of at most 1048576"}},
        BadCase{"huge_stream", [](json& j) { j["schedule"]["stream_frames"] = 1 << 21; },
                {"schedule.stream_frames", "at most 1048576"}}));

TEST(PipelineJson, MalformedJsonIsOneLine) {
  try {
    parse_pipeline("{\"schema\": ", "p.json");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("p.json: malformed JSON"), std::string::npos);
  }
  EXPECT_THROW(read_pipeline("/nonexistent/p.json"), InputError);
}

}  // namespace
}  // namespace megaops
