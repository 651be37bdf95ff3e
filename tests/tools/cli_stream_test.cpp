// `megaops stream` and `megaops plan-pipeline` as a user runs them on a machine without a GPU
// (or with --cpu): the WAV holds exactly the CPU oracle's audio of the stream it names, the
// timestamps say when each chunk was published (the first not before producer step h), a
// composition written by the planner runs, and every bad input ends in one line and exit 1.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/text_file.h"
#include "io/wav.h"
#include "models/pipeline_json.h"
#include "pipeline/stream.h"
#include "reference/pipeline_oracle.h"
#include "tools/cli_util.h"

namespace megaops {
namespace {

namespace fs = std::filesystem;
using testing::count_lines;
using testing::run_cli;

const std::string TINY = std::string(MEGAOPS_SOURCE_DIR) + "/tests/fixtures/pipelines/tiny.json";

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("megaops_stream_" + std::to_string(getpid()));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

TEST(CliStream, WavIsTheOraclesAudio) {
  TempDir d;
  const auto r =
      run_cli("stream --pipeline " + TINY + " --out " + (d / "a.wav") + " --timestamps " +
              (d / "t.json") + " --cpu --batch 2 --write-stream 1 --seed 7 --repeats 2");
  ASSERT_EQ(r.status, 0) << r.out;
  const PipelineConfig p = read_pipeline(TINY);
  ref::PipelineOracle oracle(p, 7, 2);
  const StreamSamples want = run_pipeline_whole(p, oracle, pipeline_prompts(p, 2, 7 + 3));
  const WavData wav = read_wav_f32(d / "a.wav");
  EXPECT_EQ(wav.sample_rate, 600);
  ASSERT_EQ(wav.samples.size(), want[1].size());
  for (size_t i = 0; i < wav.samples.size(); ++i) ASSERT_EQ(wav.samples[i], want[1][i]) << i;
  const auto t = nlohmann::json::parse(read_text_file(d / "t.json"));
  EXPECT_EQ(t["schema"], "megaops-stream-times/1");
  EXPECT_EQ(t["batch"], 2);
  EXPECT_EQ(t["step_h"], 5);
  EXPECT_EQ(t["runs"].size(), 2u);
  ASSERT_EQ(t["chunks"].size(), 4u);
  const auto& steps = t["steps_done_ms"];
  EXPECT_GE(t["chunks"][0]["published_ms"].get<double>(), steps[4].get<double>());
  double prev = 0;
  int samples = 0;
  for (const auto& c : t["chunks"]) {
    EXPECT_GE(c["published_ms"].get<double>(), prev);
    prev = c["published_ms"];
    samples += c["samples"].get<int>();
  }
  EXPECT_EQ(samples, 72);
  EXPECT_GT(t["rtfx"]["mean"].get<double>(), 0);
  EXPECT_GT(t["steady_rtfx"]["mean"].get<double>(), 0);
  EXPECT_NE(r.out.find("T_pub"), std::string::npos);
}

TEST(CliStream, PlannerCompositionRuns) {
  TempDir d;
  auto r = run_cli("plan-pipeline --pipeline " + TINY + " --batch 2 --top 3 --out " +
                   (d / "pick.json") + " --pool 8 --pool-out " + (d / "pool.json") + " --json " +
                   (d / "plan.json") + " --events-out " + (d / "ev.json"));
  ASSERT_EQ(r.status, 0) << r.out;
  const auto plan = nlohmann::json::parse(read_text_file(d / "plan.json"));
  EXPECT_EQ(plan["candidates"], 394);
  EXPECT_EQ(plan["ranked"].size(), 394u);
  EXPECT_LT(plan["plan_seconds"].get<double>(), 60.0);
  EXPECT_EQ(plan["profile_contexts"]["local"], 2);
  const auto pool = nlohmann::json::parse(read_text_file(d / "pool.json"));
  ASSERT_EQ(pool.size(), 8u);
  for (const auto& c : pool) EXPECT_TRUE(c["executor_supports"].get<bool>());
  EXPECT_NE(read_text_file(d / "ev.json").find("launches"), std::string::npos);
  r = run_cli("stream --pipeline " + TINY + " --cpu --out " + (d / "b.wav") + " --composition " +
              (d / "pick.json"));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find(plan["ranked"][plan["pick"].get<int>() - 1]["label"].get<std::string>()),
            std::string::npos)
      << r.out;
}

struct Bad {
  std::string args;
  std::vector<std::string> mention;
};

TEST(CliStream, BadInputIsOneLine) {
  TempDir d;
  nlohmann::json j = nlohmann::json::parse(read_text_file(TINY));
  j["stages"][1]["type"] = "vocoder";
  write(d / "unknown.json", j.dump());
  j = nlohmann::json::parse(read_text_file(TINY));
  j["schedule"]["lookahead_steps"] = 30;
  write(d / "lookahead.json", j.dump());
  write(d / "pers.json",
        R"({"schema": "megaops-pipeline-composition/1", "policy": "serial", "regions": [
             {"groups": ["prefill"], "backend": "conventional"},
             {"groups": ["producer", "local"], "backend": "persistent"},
             {"groups": ["codec"], "backend": "conventional"}]})");
  write(d / "split.json",
        R"({"schema": "megaops-pipeline-composition/1", "policy": "fixed_split", "split": 88,
            "regions": [{"groups": ["prefill", "producer", "local", "codec"],
                         "backend": "persistent"}]})");
  write(d / "gap.json",
        R"({"schema": "megaops-pipeline-composition/1", "policy": "serial", "regions": [
             {"groups": ["prefill"], "backend": "conventional"},
             {"groups": ["local"], "backend": "conventional"}]})");
  const std::string out = " --out " + (d / "x.wav");
  const std::vector<Bad> cases = {
      {"stream --pipeline " + (d / "unknown.json") + out, {"stages[1].type", "vocoder"}},
      {"stream --pipeline " + (d / "lookahead.json") + out,
       {"schedule.lookahead_steps", "beyond the stream"}},
      {"stream --pipeline " + TINY + out + " --batch 65", {"--batch", "1..64", "65"}},
      {"stream --pipeline " + TINY + out + " --batch 2 --write-stream 2", {"--write-stream"}},
      {"stream --pipeline " + TINY, {"--out", "missing"}},
      {"stream --pipeline " + TINY + out + " --composition " + (d / "pers.json"),
       {"pers.json", "regions[1]", "producer+local", "no executor yet"}},
      {"stream --pipeline " + TINY + out + " --composition " + (d / "split.json"),
       {"split.json", "policy", "fixed_split"}},
      {"stream --pipeline " + TINY + out + " --composition " + (d / "gap.json"),
       {"gap.json", "regions[1].groups", "producer"}},
      {"stream --pipeline /nonexistent/p.json" + out, {"/nonexistent/p.json"}},
      {"plan-pipeline --pipeline " + TINY + " --batch 0", {"--batch"}},
      {"plan-pipeline --pipeline " + TINY + " --splits 0,66", {"splits", "found 0"}},
      {"plan-pipeline --pipeline " + TINY + " --profile /nonexistent/prof.json",
       {"/nonexistent/prof.json"}},
      {"plan-pipeline --pipeline " + TINY + " --pool 4", {"--pool", "--pool-out"}},
  };
  for (const Bad& c : cases) {
    const auto r = run_cli(c.args);
    EXPECT_EQ(r.status, 1) << c.args << "\n" << r.out;
    EXPECT_EQ(count_lines(r.out), 1) << c.args << "\n" << r.out;
    for (const std::string& m : c.mention)
      EXPECT_NE(r.out.find(m), std::string::npos) << c.args << "\n" << r.out << "\nmissing " << m;
  }
}

}  // namespace
}  // namespace megaops
