// The `megaops` command line as a user meets it: real processes, real files. Bad input must give
// exactly one error line naming what was wrong and a non-zero exit; SIGINT must stop generation
// cleanly.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "models/checkpoint.h"
#include "models/model_config.h"
#include "tools/cli_util.h"

namespace {

namespace fs = std::filesystem;

using Result = megaops::testing::CliResult;
using megaops::testing::count_lines;
using megaops::testing::run_cli;

// A tiny checkpoint written once by `init-random` for the whole suite, removed at exit (an
// earlier process of the same pid may have left one: it is replaced).
const fs::path& tiny_checkpoint() {
  struct Checkpoint {
    fs::path dir = fs::path(::testing::TempDir()) / ("megaops-cli-" + std::to_string(getpid()));
    Checkpoint() {
      fs::remove_all(dir);
      const Result r = run_cli("init-random --preset tiny-llama3 --out " + dir.string());
      EXPECT_EQ(r.status, 0) << r.out;
    }
    ~Checkpoint() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  };
  static const Checkpoint checkpoint;
  return checkpoint.dir;
}

void expect_one_line_error(const Result& r, const std::string& must_contain) {
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find(must_contain), std::string::npos) << r.out;
}

// `command` followed by each case's arguments: one error line naming the case's option, exit
// status 1 (options checked before any GPU work, so on any machine).
void expect_each_bad_option(const std::string& command,
                            std::initializer_list<std::pair<const char*, const char*>> cases) {
  for (const auto& [args, names] : cases) {
    const Result r = run_cli(command + " " + args);
    EXPECT_EQ(r.status, 1) << args << ": " << r.out;
    EXPECT_EQ(count_lines(r.out), 1) << args << ": " << r.out;
    EXPECT_NE(r.out.find(names), std::string::npos) << args << ": " << r.out;
  }
}

TEST(Cli, InitRandomWritesLoadableCheckpoint) {
  EXPECT_TRUE(fs::exists(tiny_checkpoint() / "config.json"));
  EXPECT_TRUE(fs::exists(tiny_checkpoint() / "model.safetensors"));
}

// --config: any config.json the loader accepts (here a Qwen 3 of a size no preset has): the
// checkpoint loads with its shapes and runs; a bad config or both / neither of --preset and
// --config is one error line.
TEST(Cli, InitRandomFromAConfig) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("megaops-cfg-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const nlohmann::json cfg = {{"architectures", {"Qwen3ForCausalLM"}},
                              {"model_type", "qwen3"},
                              {"vocab_size", 320},
                              {"hidden_size", 96},
                              {"intermediate_size", 160},
                              {"num_hidden_layers", 3},
                              {"num_attention_heads", 6},
                              {"num_key_value_heads", 2},
                              {"head_dim", 32},
                              {"max_position_embeddings", 256},
                              {"rms_norm_eps", 1e-6},
                              {"rope_theta", 1000000.0},
                              {"tie_word_embeddings", true},
                              {"bos_token_id", 1},
                              {"eos_token_id", 2}};
  std::ofstream(dir / "config.json") << cfg.dump();
  const fs::path out = dir / "ckpt";
  const Result r =
      run_cli("init-random --config " + (dir / "config.json").string() + " --out " + out.string());
  ASSERT_EQ(r.status, 0) << r.out;
  std::ifstream f(out / "config.json");
  const nlohmann::json written = nlohmann::json::parse(f);
  EXPECT_EQ(written["hidden_size"], 96) << written;
  EXPECT_EQ(written["num_hidden_layers"], 3) << written;
  EXPECT_EQ(
      run_cli("generate --cpu --model " + out.string() + " --prompt-ids 1,5 --max-new-tokens 2")
          .status,
      0);
  std::ofstream(dir / "bad.json") << R"({"architectures": ["Qwen3ForCausalLM"]})";
  const Result bad = run_cli("init-random --config " + (dir / "bad.json").string() + " --out " +
                             out.string() + "2");
  EXPECT_EQ(bad.status, 1) << bad.out;
  EXPECT_EQ(count_lines(bad.out), 1) << bad.out;
  EXPECT_NE(bad.out.find("bad.json"), std::string::npos) << bad.out;
  const Result both = run_cli("init-random --preset tiny-qwen3 --config " +
                              (dir / "config.json").string() + " --out " + out.string() + "3");
  EXPECT_EQ(both.status, 1) << both.out;
  EXPECT_NE(both.out.find("--preset/--config"), std::string::npos) << both.out;
  fs::remove_all(dir);
}

// Names in `parent` other than `keep`: what init-random left beside its output.
std::vector<std::string> leftovers(const fs::path& parent, const std::string& keep) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(parent))
    if (e.path().filename() != keep) out.push_back(e.path().filename().string());
  return out;
}

// init-random publishes --out only when complete: an existing directory is refused (one line,
// left untouched) unless --force, which replaces it; nothing is left beside it.
TEST(Cli, InitRandomPublishesACompleteDirectoryOnly) {
  const fs::path parent =
      fs::path(::testing::TempDir()) / ("megaops-publish-" + std::to_string(getpid()));
  fs::remove_all(parent);
  const fs::path out = parent / "ckpt";
  const std::string args =
      "init-random --preset tiny-qwen3 --shard-gb 0.0001 --out " + out.string();
  Result r = run_cli(args);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(fs::exists(out / "model.safetensors.index.json"));
  EXPECT_EQ(leftovers(parent, "ckpt"), std::vector<std::string>{});
  std::ofstream(out / "marker") << "mine";
  expect_one_line_error(run_cli(args), "expected a new or empty directory");
  EXPECT_TRUE(fs::exists(out / "marker"));
  r = run_cli(args + " --force");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_FALSE(fs::exists(out / "marker"));
  EXPECT_TRUE(fs::exists(out / "config.json"));
  EXPECT_EQ(run_cli("generate --cpu --model " + out.string() + " --prompt-ids 1 --max-new-tokens 1")
                .status,
            0);
  EXPECT_EQ(leftovers(parent, "ckpt"), std::vector<std::string>{});
  fs::remove_all(out);
  fs::create_directories(out);  // an empty directory is as good as none
  r = run_cli(args + "/");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(leftovers(parent, "ckpt"), std::vector<std::string>{});
  fs::remove_all(parent);
}

// SIGINT or SIGTERM while init-random writes a 1.2 GB checkpoint: it stops promptly with 128 +
// the signal, one line, and leaves neither --out nor anything staged beside it.
TEST(Cli, InitRandomStopsCleanlyOnSignals) {
  for (int sig : {SIGINT, SIGTERM}) {
    SCOPED_TRACE(sig);
    const fs::path parent = fs::path(::testing::TempDir()) /
                            ("megaops-sig-" + std::to_string(getpid()) + "-" + std::to_string(sig));
    fs::remove_all(parent);
    fs::create_directories(parent);
    const fs::path out = parent / "ckpt";
    const fs::path log = parent.string() + ".log";
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      execl(MEGAOPS_CLI_PATH, MEGAOPS_CLI_PATH, "init-random", "--preset", "qwen3-0.6b", "--out",
            out.c_str(), nullptr);
      _exit(127);
    }
    // Wait until the staged directory exists, so the signal lands while writing.
    for (int i = 0; i < 400 && leftovers(parent, "").empty(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    kill(pid, sig);
    int st = 0;
    const auto t0 = std::chrono::steady_clock::now();
    waitpid(pid, &st, 0);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(WIFEXITED(st)) << "killed by signal " << (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    EXPECT_EQ(WEXITSTATUS(st), 128 + sig);
    EXPECT_LT(secs, 20.0);
    EXPECT_EQ(leftovers(parent, ""), std::vector<std::string>{});
    std::stringstream text;
    text << std::ifstream(log).rdbuf();
    EXPECT_NE(text.str().find("interrupted: " + out.string() + ": nothing written"),
              std::string::npos)
        << text.str();
    fs::remove_all(parent);
    fs::remove(log);
  }
}

TEST(Cli, GenerateOnCpuStreamsTokenIds) {
  const Result r = run_cli("generate --cpu --ignore-eos --model " + tiny_checkpoint().string() +
                           " --prompt-ids 1,2,3 --max-new-tokens 5");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("CPU oracle"), std::string::npos) << r.out;
  std::istringstream in(r.out);
  std::string line;
  int ids = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line.find_first_not_of("0123456789") != std::string::npos) continue;
    const int id = std::stoi(line);
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 512);
    ++ids;
  }
  EXPECT_EQ(ids, 5) << r.out;
}

TEST(Cli, BenchServeRunsTheEngineOfflineAndWritesJson) {
  const fs::path json = fs::path(::testing::TempDir()) /
                        ("megaops-bench-serve-" + std::to_string(getpid()) + ".json");
  const Result r =
      run_cli("bench-serve --cpu --model " + tiny_checkpoint().string() +
              " --batch 3 --requests 5 --prompt 7 --gen 6 --repeats 2 --json " + json.string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("CPU oracle"), std::string::npos) << r.out;
  std::ifstream f(json);
  const nlohmann::json j = nlohmann::json::parse(f);
  fs::remove(json);
  ASSERT_EQ(j.at("repeats").size(), 2u);
  for (const nlohmann::json& rep : j.at("repeats")) {
    // Five requests of six tokens; three at a time: at least two batches' worth of steps.
    EXPECT_EQ(rep.at("output_tokens").get<int>(), 30);
    EXPECT_GE(rep.at("steps").get<int>(), 12);
    EXPECT_GT(rep.at("model_step_ms_mean").get<double>(), 0.0);
    EXPECT_GE(rep.at("host_ms_per_step").get<double>(), 0.0);
  }
  EXPECT_EQ(j.at("kind"), "bench_serve");
  EXPECT_EQ(j.at("gpu"), "cpu");
}

TEST(Cli, BenchServeNamesBadOptions) {
  const std::string m = " --cpu --model " + tiny_checkpoint().string();
  for (const auto& [args, want] : std::initializer_list<std::pair<std::string, const char*>>{
           {"bench-serve" + m + " --batch 0", "--batch"},
           {"bench-serve" + m + " --gen 0", "--gen"},
           {"bench-serve" + m + " --prompt 1000 --gen 100", "beyond the model's context"},
           {"bench-serve" + m + " --plan p.json", "--plan"},
           {"bench-serve --model /nonexistent/dir --cpu", "/nonexistent/dir"}}) {
    SCOPED_TRACE(args);
    expect_one_line_error(run_cli(args), want);
  }
}

// What generate printed on stdout and stderr without its "generate: ..." lines (which side it ran
// on, the summary with its timings): the streamed tokens.
std::string streamed(const Result& r) {
  std::istringstream in(r.out);
  std::string line, out;
  while (std::getline(in, line))
    if (line.rfind("generate: ", 0) != 0) out += line + "\n";
  return out;
}

TEST(Cli, GenerateIsDeterministicWhenGreedy) {
  const std::string args = "generate --cpu --ignore-eos --model " + tiny_checkpoint().string() +
                           " --prompt-ids 4,5 --max-new-tokens 4";
  const Result one = run_cli(args), two = run_cli(args);
  EXPECT_EQ(count_lines(streamed(one)), 4) << one.out;
  EXPECT_EQ(streamed(one), streamed(two));
}

// --tp on the CPU oracle: the tensor-parallel ranks in one process give the same tokens; a split
// that does not divide the model is one error line naming the config field.
TEST(Cli, GenerateTensorParallelOnTheCpuOracle) {
  const std::string args = "generate --cpu --ignore-eos --model " + tiny_checkpoint().string() +
                           " --prompt-ids 4,5,6 --max-new-tokens 8";
  const Result one = run_cli(args), two = run_cli(args + " --tp 2");
  ASSERT_EQ(one.status, 0) << one.out;
  ASSERT_EQ(two.status, 0) << two.out;
  EXPECT_EQ(count_lines(streamed(one)), 8) << one.out;
  EXPECT_EQ(streamed(one), streamed(two));
  expect_one_line_error(run_cli(args + " --tp 4"), "num_key_value_heads");
  expect_one_line_error(run_cli(args + " --tp 2 --tp-rank 1"), "--tp-rank");
  expect_one_line_error(run_cli(args + " --tp 0"), "--tp: expected 1..64");
  expect_one_line_error(run_cli(args + " --tp 2 --tp-reduce bogus"), "--tp-reduce");
  expect_one_line_error(run_cli(args + " --tp-reduce peer"), "--tp 2 or more");
}

// generate --prefill names the two paths (checked on every build, before choosing the CPU or GPU).
TEST(Cli, GeneratePrefillRejectsUnknownPath) {
  const std::string args = "generate --cpu --ignore-eos --model " + tiny_checkpoint().string() +
                           " --prompt-ids 4,5 --max-new-tokens 2 --prefill";
  const Result ok = run_cli(args + " graph");
  EXPECT_EQ(ok.status, 0) << ok.out;  // --cpu: the oracle runs, the path is the GPU's option
  expect_one_line_error(run_cli(args + " decode"), "expected layers or graph, found 'decode'");
}

// Sampling parameters, enum values and lengths are checked before anything runs, on every path
// (--cpu included): one line naming the option, exit 1 (CLI11's own type errors: 2).
TEST(Cli, GenerateRejectsBadSamplingAndLengths) {
  const std::string gen =
      "generate --cpu --model " + tiny_checkpoint().string() + " --prompt-ids 1,2";
  expect_each_bad_option(
      gen, {{"--temperature nan", "--temperature: expected a finite value >= 0"},
            {"--temperature inf", "--temperature"},
            {"--temperature -1", "--temperature"},
            {"--top-k -5", "--top-k: expected >= 0"},
            {"--top-p nan", "--top-p: expected a value in (0, 1]"},
            {"--top-p 0", "--top-p"},
            {"--top-p 1.5", "--top-p"},
            {"--backend foo", "--backend"},
            {"--prefill foo", "--prefill"},
            {"--max-new-tokens 2147483647", "a context of 2147483649 tokens, expected 1..1024"},
            {"--max-new-tokens 0", "--max-new-tokens"}});
  for (const char* seed : {"-1", "18446744073709551616", "x"}) {
    const Result r = run_cli(gen + " --seed " + seed);
    EXPECT_EQ(r.status, 2) << seed << ": " << r.out;
    EXPECT_NE(r.out.find("--seed"), std::string::npos) << seed << ": " << r.out;
  }
  // chat resolves its sampling against generation_config.json (-1: not given) with the same check.
  expect_each_bad_option("chat --model " + tiny_checkpoint().string() + " < /dev/null",
                         {{"--temperature nan", "--temperature: expected a finite value >= 0"},
                          {"--temperature -2", "--temperature"},
                          {"--top-k -5", "--top-k: expected >= 0"},
                          {"--top-p nan", "--top-p: expected a value in (0, 1]"}});
  const Result ok = run_cli(gen +
                            " --seed 18446744073709551615 --temperature 0.7 --top-k 3 "
                            "--top-p 0.9 --max-new-tokens 2 --ignore-eos");
  EXPECT_EQ(ok.status, 0) << ok.out;
}

// The commands that need a GPU check their options first, so a bad value is named on any machine
// (not hidden behind "no CUDA device").
TEST(Cli, GpuCommandsNameABadOptionBeforeAskingForAGpu) {
  expect_each_bad_option("bench --preset tiny-llama3",
                         {{"--backend foo", "--backend"},
                          {"--pdl maybe", "--pdl"},
                          {"--batch 0", "--batch"},
                          {"--overlap-streams 9", "--overlap-streams"}});
  expect_each_bad_option("trace --preset tiny-llama3",
                         {{"--streams 0", "--streams"}, {"--fold-norms x", "--fold-norms"}});
  expect_each_bad_option("profile --preset tiny-llama3", {{"--steps 0", "--steps"}});
}

TEST(Cli, MissingModelDirectory) {
  expect_one_line_error(run_cli("generate --model /nonexistent/dir --prompt-ids 1"),
                        "/nonexistent/dir");
}

TEST(Cli, UnknownPreset) {
  expect_one_line_error(run_cli("init-random --preset llama9-1t --out /tmp/x"), "llama9-1t");
}

TEST(Cli, PromptIdOutsideVocabulary) {
  expect_one_line_error(
      run_cli("generate --model " + tiny_checkpoint().string() + " --prompt-ids 1,512"),
      "outside the vocabulary");
}

TEST(Cli, MalformedPromptIds) {
  expect_one_line_error(
      run_cli("generate --model " + tiny_checkpoint().string() + " --prompt-ids 1,x,3"),
      "--prompt-ids");
}

TEST(Cli, ContextLongerThanConfigured) {
  expect_one_line_error(run_cli("generate --cpu --model " + tiny_checkpoint().string() +
                                " --prompt-ids 1 --max-new-tokens 5000"),
                        "max_position_embeddings");
}

TEST(Cli, CorruptSafetensorsNamesTheFile) {
  const fs::path bad = fs::path(::testing::TempDir()) / ("megaops-bad-" + std::to_string(getpid()));
  fs::create_directories(bad);
  fs::copy_file(tiny_checkpoint() / "config.json", bad / "config.json",
                fs::copy_options::overwrite_existing);
  std::ofstream(bad / "model.safetensors", std::ios::binary) << "\x10\x00\x00";  // truncated
  expect_one_line_error(run_cli("generate --model " + bad.string() + " --prompt-ids 1"),
                        "model.safetensors");
}

TEST(Cli, UsageErrorExitsTwo) {
  const Result r = run_cli("generate --model");
  EXPECT_EQ(r.status, 2) << r.out;
}

// SIGINT during a long generation: the loop stops and the process exits 130, promptly. The model
// is large enough (~40M parameters) that 1000 tokens on the CPU oracle take far longer than the
// test.
TEST(Cli, SigintStopsGenerationCleanly) {
  megaops::ModelConfig cfg = megaops::preset_config("tiny-llama3");
  cfg.vocab_size = 32000;
  cfg.hidden_size = 512;
  cfg.intermediate_size = 2048;
  cfg.num_layers = 6;
  cfg.num_heads = 8;
  cfg.num_kv_heads = 2;
  cfg.head_dim = 64;
  cfg.max_position_embeddings = 2048;
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("megaops-sigint-" + std::to_string(getpid()));
  megaops::write_random_checkpoint(cfg, dir.string(), 1, megaops::DType::BF16, size_t{1} << 40, {});
  const std::string model = dir.string();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    dup2(devnull, 2);
    execl(MEGAOPS_CLI_PATH, MEGAOPS_CLI_PATH, "generate", "--cpu", "--ignore-eos", "--model",
          model.c_str(), "--prompt-ids", "1,2", "--max-new-tokens", "1000", nullptr);
    _exit(127);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  kill(pid, SIGINT);
  int st = 0;
  const auto t0 = std::chrono::steady_clock::now();
  waitpid(pid, &st, 0);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(WIFEXITED(st)) << "killed by signal " << (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  EXPECT_EQ(WEXITSTATUS(st), 130);
  EXPECT_LT(secs, 20.0);  // one forward step at most, plus loading under sanitizers
}

}  // namespace

namespace {

const std::string PROFILE_1B =
    std::string(MEGAOPS_SOURCE_DIR) + "/bench/results/2026-11-29-70bc941/profile_llama3.2-1b.json";

// `plan` ranks every composition and the whole-step backends but picks only what today's
// executors run: a serial composition of conventional and overlap regions, conventional + PDL or
// the PDL chain with a set of folds (decode), written as a plan (graph/plan.h). At llama3.2-1b
// batch 1 it picks the chain with every fold, the fastest step measured there; its pool holds
// the other chains, conventional + PDL and the baseline, each a plan `bench --plan` takes.
TEST(Cli, PlanPicksARunnableCandidateAndWritesJson) {
  const std::string tag = std::to_string(getpid());
  const fs::path out = fs::path(::testing::TempDir()) / ("megaops-plan-" + tag + ".json");
  const fs::path pool = fs::path(::testing::TempDir()) / ("megaops-plan-pool-" + tag + ".json");
  const Result r =
      run_cli("plan --preset llama3.2-1b --batch 1 --profile " + PROFILE_1B + " --top 3 --out " +
              out.string() + " --pool 8 --pool-out " + pool.string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("pick: rank"), std::string::npos) << r.out;
  std::ifstream f(out);
  const nlohmann::json j = nlohmann::json::parse(f);
  EXPECT_EQ(j["format"], "megaops-plan");
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["model"], "llama3.2-1b");
  EXPECT_EQ(j["objective"], "step");
  EXPECT_GT(j["predicted_us"].get<double>(), 0.0);
  EXPECT_NE(j["source"].get<std::string>().find("megaops plan --preset llama3.2-1b"),
            std::string::npos)
      << j;
  const nlohmann::json& d = j["decode"];
  EXPECT_EQ(d["backend"], "pdl_chain") << d;
  EXPECT_EQ(d["overlap_streams"], 1) << d;
  EXPECT_TRUE(d["folds"]["norms"].get<bool>() && d["folds"]["silu"].get<bool>() &&
              d["folds"]["rope"].get<bool>())
      << d;
  EXPECT_TRUE(d["regions"].empty());
  std::ifstream pf(pool);
  const nlohmann::json arr = nlohmann::json::parse(pf);
  int chains = 0, pdl = 0, plain = 0;
  for (const auto& e : arr) {
    const nlohmann::json& p = e["plan"]["decode"];
    // The whole-step chains (the chain with persistent regions has regions).
    chains += p["backend"] == "pdl_chain" && p["regions"].empty();
    pdl += p["backend"] == "conventional" && p["pdl"].get<bool>();
    plain += p["backend"] == "conventional" && !p["pdl"].get<bool>() && p["regions"].empty();
    const fs::path one = fs::path(::testing::TempDir()) / ("megaops-plan-one-" + tag + ".json");
    std::ofstream(one) << e["plan"].dump();
    const Result b = run_cli("bench --plan " + one.string());
    EXPECT_EQ(b.out.find(one.string() + ":"), std::string::npos) << b.out;  // not a plan error
    fs::remove(one);
  }
  EXPECT_EQ(chains, 4) << arr;  // norms and RoPE each on or off; SwiGLU in gate_up's epilogue
  EXPECT_EQ(pdl, 1) << arr;
  EXPECT_EQ(plain, 1) << arr;  // the baseline
  fs::remove(out);
  fs::remove(pool);
}

// --objective ttft: the layer prefill against the prompt rows replayed through each runnable
// composition of the decode step. One 32-token prompt is one replay of a 32-row step; the pool
// holds the layer prefill as the baseline and graph candidates with their replays, and `bench
// --plan` accepts every one of them (it stops at the GPU check, not at the plan).
TEST(Cli, PlanTtftRanksTheLayerPrefillAgainstDecodeGraphReplays) {
  const fs::path dir = fs::path(::testing::TempDir());
  const std::string tag = std::to_string(getpid());
  const fs::path pool = dir / ("megaops-ttft-pool-" + tag + ".json");
  const Result r = run_cli(
      "plan --preset llama3.2-1b --batch 1 --tokens 32 --objective ttft "
      "--profile " +
      PROFILE_1B + " --top 3 --pool 8 --pool-out " + pool.string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("1 replay(s) of a 32-row decode step"), std::string::npos) << r.out;
  std::ifstream f(pool);
  const nlohmann::json arr = nlohmann::json::parse(f);
  ASSERT_GE(arr.size(), 8u);
  int layers = 0, graphs = 0;
  for (const auto& e : arr) {
    const nlohmann::json& plan = e["plan"];
    EXPECT_EQ(plan["format"], "megaops-plan");
    EXPECT_EQ(plan["objective"], "ttft");
    EXPECT_EQ(plan["batch"], 1);
    if (plan["prefill"]["path"] == "layers") {
      ++layers;
      EXPECT_NE(e["selected_by"].dump().find("baseline"), std::string::npos) << e;
      EXPECT_EQ(plan["decode"]["backend"], "conventional");
    } else {
      ++graphs;
      EXPECT_EQ(plan["prefill"]["path"], "graph");
      EXPECT_NE(plan["source"].get<std::string>().find("in 1 x 32 rows"), std::string::npos)
          << plan;
    }
    const fs::path one = dir / ("megaops-ttft-plan-" + tag + ".json");
    std::ofstream(one) << plan.dump();
    const Result b = run_cli("bench --plan " + one.string());
    EXPECT_EQ(b.out.find(one.string() + ":"), std::string::npos) << b.out;  // not a plan error
    fs::remove(one);
  }
  EXPECT_EQ(layers, 1);
  EXPECT_GE(graphs, 7);
  fs::remove(pool);
}

// bench-matmul checks its options before it looks for a GPU: each bad one is one error line
// naming the option, exit status 1, on any machine.
TEST(Cli, BenchMatmulBadOptions) {
  expect_each_bad_option("bench-matmul", {{"--paths small,bogus", "--paths"},
                                          {"--stages 1", "--stages"},
                                          {"--stages 0,17", "--stages"},
                                          {"--batch 0", "--batch"},
                                          {"--batch 1,x", "--batch"},
                                          {"--launches 0", "--launches"},
                                          {"--repeats 0", "--repeats"},
                                          {"--preset no-such-model", "no-such-model"}});
}

TEST(Cli, PlanWithMissingProfile) {
  const Result r = run_cli("plan --preset llama3.2-1b --profile /nonexistent/profile.json");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("/nonexistent/profile.json"), std::string::npos) << r.out;
}

// Kernel boundaries measured by `bench-boundary` on the planned GPU replace the cost model's
// launch_us and pdl_wait_us (said on stderr, and the predictions move). Measured on another GPU
// than --gpu names, they are refused. bench-boundary's own options are checked before it looks
// for a GPU.
TEST(Cli, PlanTakesMeasuredKernelBoundaries) {
  const std::string tag = std::to_string(getpid());
  const fs::path bench = fs::path(::testing::TempDir()) / ("megaops-boundary-" + tag + ".json");
  auto write = [&](const char* gpu) {
    std::ofstream(bench) << nlohmann::json{
        {"schema", "megaops-op-bench/1"},
        {"gpu", gpu},
        {"dtype", "bf16"},
        {"entries",
         {{{"op", "kernel_boundary"},
           {"shape", "plain"},
           {"backend", "standalone"},
           {"cta_budget", 132},
           {"us", 4.5}},
          {{"op", "kernel_boundary"},
           {"shape", "pdl"},
           {"backend", "standalone"},
           {"cta_budget", 132},
           {"us", 3.25}}}}}.dump();
  };
  auto baseline = [](const std::string& out) {
    const size_t at = out.find("all-conventional baseline ");
    return at == std::string::npos ? -1.0 : std::stod(out.substr(at + 26));
  };
  const Result plain = run_cli("plan --preset llama3.2-1b --batch 1 --top 0");
  ASSERT_EQ(plain.status, 0) << plain.out;
  write("NVIDIA H200");
  const Result measured =
      run_cli("plan --preset llama3.2-1b --batch 1 --top 0 --profile " + bench.string());
  ASSERT_EQ(measured.status, 0) << measured.out;
  EXPECT_NE(measured.out.find("a plain kernel boundary costs 4.500 us"), std::string::npos)
      << measured.out;
  EXPECT_NE(measured.out.find("a pdl kernel boundary costs 3.250 us"), std::string::npos)
      << measured.out;
  // Each of the step's 149 launches 2.7 us dearer (no profile: first-principles op times).
  EXPECT_NEAR(baseline(measured.out) - baseline(plain.out), 149 * 2.7, 0.5) << measured.out;
  const Result other = run_cli(
      "plan --preset llama3.2-1b --batch 1 --top 0 --gpu \"NVIDIA H100 "
      "NVL\" --hbm-gbps 3900 --sms 132 --profile " +
      bench.string());
  expect_one_line_error(other, "--gpu: expected the GPU the evidence was measured on");
  fs::remove(bench);
  expect_each_bad_option("bench-boundary", {{"--kernels 1", "--kernels"},
                                            {"--kb 0", "--kb"},
                                            {"--kb 4194304 --kernels 64", "--kb"},
                                            {"--iterations 0", "--iterations"}});
}

// The cost model's PDL figures are overridable, within 0..100 us: anything else is one error line
// naming the option.
TEST(Cli, PlanBadCostOptions) {
  expect_each_bad_option("plan --preset llama3.2-1b", {{"--pdl-wait-us 101", "--pdl-wait-us"},
                                                       {"--pdl-launch-us 1e9", "--pdl-launch-us"},
                                                       {"--pdl-wait-us -0.5", "--pdl-wait-us"}});
}

}  // namespace

namespace {

// `bench --prefill` names the two paths; anything else is one error line, before GPU work, on
// any build.
TEST(Cli, BenchPrefillRejectsUnknownPath) {
  const Result r = run_cli("bench --preset tiny-llama3 --prefill decode");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("--prefill"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("expected layers or graph, found 'decode'"), std::string::npos) << r.out;
}

// `bench --decode-loop` names the two loops; anything else is one error line, before GPU work, on
// any build.
TEST(Cli, BenchDecodeLoopRejectsUnknownLoop) {
  const Result r = run_cli("bench --preset tiny-llama3 --decode-loop async");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("--decode-loop"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("'async'"), std::string::npos) << r.out;
}

// `bench --overlap-pdl-chain` needs one stream: one error line naming the flag, on any machine.
TEST(Cli, BenchPdlChainNeedsOneStream) {
  const Result r = run_cli("bench --preset tiny-llama3 --backend overlap --overlap-pdl-chain");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("--overlap-pdl-chain"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("needs --overlap-streams 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("found 3"), std::string::npos) << r.out;
}

// The chain's two options take named values; anything else is one error line naming the option,
// before any GPU work.
TEST(Cli, BenchChainOptionsRejectUnknownValues) {
  expect_each_bad_option(
      "bench --preset tiny-llama3 --backend overlap --overlap-streams 1 "
      "--overlap-pdl-chain",
      {{"--overlap-chain-waits event", "--overlap-chain-waits"},
       {"--overlap-fold-norms yes", "--overlap-fold-norms"},
       {"--overlap-fold-silu 1", "--overlap-fold-silu"},
       {"--overlap-fold-rope yes", "--overlap-fold-rope"}});
}

// `bench --plan` reads the plan format strictly; anything else is one error line naming the plan
// file and the field, before any GPU work. Several plans run on one executor: of one model and
// batch, differing only in what the executor switches between runs.
TEST(Cli, BenchPlanRejectsWhatNoExecutorRuns) {
  const fs::path dir = fs::path(::testing::TempDir());
  const std::string tag = std::to_string(getpid());
  const fs::path conv = dir / ("megaops-conv-" + tag + ".json");
  ASSERT_EQ(run_cli("plan --preset llama3.2-1b --profile " + PROFILE_1B + " --top 0 --out " +
                    conv.string())
                .status,
            0);
  std::ifstream in(conv);
  const nlohmann::json plan = nlohmann::json::parse(in);
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](nlohmann::json& j) { j["decode"]["backend"] = "persistent"; }, "decode.backend"},
      {[](nlohmann::json& j) {
         j["decode"]["backend"] = "conventional";
         j["decode"]["regions"] = {{{"first_op", "embedding"}}};
       },
       "decode.regions"},
      {[](nlohmann::json& j) { j["policy"] = "fixed_split"; }, "policy"},
      {[](nlohmann::json& j) { j["prefill"]["path"] = "decode"; }, "prefill.path"},
      {[](nlohmann::json& j) { j.erase("format"); }, "format"},
      {[](nlohmann::json& j) { j["model"] = 7; }, "model"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = plan;
    c.edit(j);
    const fs::path bad = dir / ("megaops-badplan-" + tag + ".json");
    std::ofstream(bad) << j.dump();
    const Result r = run_cli("bench --plan " + bad.string());
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_EQ(count_lines(r.out), 1) << r.out;
    EXPECT_NE(r.out.find(bad.string() + ": " + c.field), std::string::npos) << r.out;
    fs::remove(bad);
  }
  // Several plans run on one executor: of one model and one batch, and alike in what the
  // executor fixes when it is built.
  for (const auto& [field, edit] :
       std::vector<std::pair<std::string, std::function<void(nlohmann::json&)>>>{
           {"batch", [](nlohmann::json& j) { j["batch"] = 8; }},
           {"model", [](nlohmann::json& j) { j["model"] = "qwen3-0.6b"; }},
           {"decode", [](nlohmann::json& j) { j["decode"]["matmul"]["tune"] = true; }}}) {
    nlohmann::json j = plan;
    edit(j);
    const fs::path other = dir / ("megaops-otherplan-" + tag + ".json");
    std::ofstream(other) << j.dump();
    const Result r = run_cli("bench --plan " + conv.string() + " --plan " + other.string());
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_EQ(count_lines(r.out), 1) << r.out;
    EXPECT_NE(r.out.find(other.string() + ": " + field), std::string::npos) << r.out;
    fs::remove(other);
  }
  fs::remove(conv);
}

}  // namespace

namespace {

// `hbm-ceiling` checks its options before it looks for a GPU: one error line naming the option,
// exit status 1, on any machine.
TEST(Cli, HbmCeilingBadOptions) {
  expect_each_bad_option("hbm-ceiling", {{"--mb 0", "--mb"},
                                         {"--mb 2000000", "--mb"},
                                         {"--iterations 0", "--iterations"},
                                         {"--iterations 1001", "--iterations"}});
}

// With a GPU it prints one line, "hbm_read_gbps VALUE" with a positive value; without one (or in
// a build without CUDA) one error line saying so, exit status 1. bench parses that line from a
// child process, so its form is part of the contract.
TEST(Cli, HbmCeilingPrintsOneLineOrSaysWhyNot) {
  const Result r = run_cli("hbm-ceiling --mb 16 --iterations 2");
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  if (r.status == 0) {
    double gbps = 0;
    ASSERT_EQ(std::sscanf(r.out.c_str(), "hbm_read_gbps %lf", &gbps), 1) << r.out;
    EXPECT_GT(gbps, 0.0) << r.out;
  } else {
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_TRUE(r.out.find("no CUDA device") != std::string::npos ||
                r.out.find("no CUDA support") != std::string::npos)
        << r.out;
  }
}

}  // namespace
