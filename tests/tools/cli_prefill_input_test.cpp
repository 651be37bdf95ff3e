// Bad input for prefill, as a user meets it: a prompt over the model's context and a plan's
// prefill chunk of 0 or above the context are one error line naming the option (or the plan file
// and field) and exit status 1, before any GPU work. On a build or machine without a GPU the
// commands would otherwise stop at "no CUDA device" / "no CUDA support": the line proves the
// check comes first. The tiny presets have a context of 1024 positions.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "tools/cli_util.h"

namespace megaops {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::count_lines;
using testing::run_cli;

void expect_one_line(const CliResult& r, const std::string& what, const std::string& must) {
  EXPECT_EQ(r.status, 1) << what << ": " << r.out;
  EXPECT_EQ(count_lines(r.out), 1) << what << ": " << r.out;
  EXPECT_NE(r.out.find("error: " + must), std::string::npos) << what << ": " << r.out;
}

struct Scratch {
  fs::path dir =
      fs::path(::testing::TempDir()) / ("megaops-prefill-input-" + std::to_string(getpid()));
  Scratch() {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string file(const std::string& name, const std::string& text) const {
    const fs::path p = dir / name;
    std::ofstream(p) << text;
    return p.string();
  }
};

TEST(CliPrefillInput, APromptOverTheContextIsOneLineBeforeGpuWork) {
  for (const auto& [cmd, options] : std::vector<std::pair<std::string, std::string>>{
           {"bench --preset tiny-llama3 --prompt 1000 --gen 100", "--prompt/--gen"},
           {"bench --preset tiny-qwen3 --prompt 1025 --gen 2", "--prompt/--gen"},
           {"profile --preset tiny-llama3 --prompt 1000", "--prompt/--steps/--gen"},
           {"trace --preset tiny-llama3 --prompt 1020 --warmup 8", "--prompt/--warmup"}}) {
    const CliResult r = run_cli(cmd);
    expect_one_line(r, cmd, options + ": a context of ");
    EXPECT_NE(r.out.find("expected 1..1024 (max_position_embeddings of tiny-"), std::string::npos)
        << cmd << ": " << r.out;
  }
  // A prompt that fits with its new tokens passes the check (and stops at the GPU, if any, later).
  const CliResult fits = run_cli("bench --preset tiny-llama3 --prompt 1000 --gen 24");
  EXPECT_EQ(fits.out.find("a context of"), std::string::npos) << fits.out;
}

TEST(CliPrefillInput, APlanChunkOfZeroOrAboveTheContextIsOneLine) {
  const Scratch s;
  const std::string zero =
      s.file("zero.json", R"({"format": "megaops-plan", "version": 1, "prefill": {"chunk": 0}})");
  const std::string big = s.file("big.json", R"({"format": "megaops-plan", "version": 1,
      "model": "tiny-llama3", "prefill": {"chunk": 4096}})");
  const std::string fits = s.file("fits.json", R"({"format": "megaops-plan", "version": 1,
      "model": "tiny-llama3", "prefill": {"chunk": 1024}})");
  const fs::path ckpt = s.dir / "ckpt";
  ASSERT_EQ(run_cli("init-random --preset tiny-llama3 --out " + ckpt.string()).status, 0);
  for (const std::string& cmd :
       {std::string("bench --preset tiny-llama3"), std::string("profile --preset tiny-llama3"),
        "generate --model " + ckpt.string() + " --prompt-ids 1,2,3"}) {
    expect_one_line(run_cli(cmd + " --plan " + zero), cmd,
                    zero + ": prefill.chunk: expected 1..1048576, found 0");
    expect_one_line(run_cli(cmd + " --plan " + big), cmd,
                    big + ": prefill.chunk: expected 1..1024 (max_position_embeddings of ");
    const CliResult ok = run_cli(cmd + " --plan " + fits);
    EXPECT_EQ(ok.out.find("prefill.chunk"), std::string::npos) << cmd << ": " << ok.out;
  }
  // trace runs the overlap step: the same plan with a chain.
  const std::string chain = s.file("chain.json", R"({"format": "megaops-plan", "version": 1,
      "decode": {"backend": "pdl_chain"}, "prefill": {"chunk": 2048}})");
  expect_one_line(run_cli("trace --preset tiny-llama3 --plan " + chain), "trace",
                  chain + ": prefill.chunk: expected 1..1024");
}

// check-logits reads its reference before any GPU work: a prompt (plus the reference's tokens)
// over the checkpoint's context is one line naming the reference.
TEST(CliPrefillInput, CheckLogitsReferenceOverTheContextIsOneLine) {
  const Scratch s;
  const fs::path ckpt = s.dir / "ckpt";
  ASSERT_EQ(run_cli("init-random --preset tiny-llama3 --out " + ckpt.string()).status, 0);
  const int vocab = 512, steps = 2;
  auto write_reference = [&](const std::string& name, int prompt_len) {
    const std::vector<float> prompt(prompt_len, 5.f), tokens(steps, 7.f),
        logits(static_cast<size_t>(steps) * vocab, 0.5f);
    const std::string path = (s.dir / name).string();
    write_safetensors(
        path, {{"prompt_ids", DType::F32, {prompt_len}, prompt.data(), prompt.size() * 4},
               {"tokens", DType::F32, {steps}, tokens.data(), tokens.size() * 4},
               {"step_logits", DType::F32, {steps, vocab}, logits.data(), logits.size() * 4}});
    return path;
  };
  const std::string over = write_reference("over.safetensors", 1022);
  expect_one_line(run_cli("check-logits --model " + ckpt.string() + " --expected " + over), over,
                  over + ": prompt_ids/tokens: a context of 1025 tokens, expected 1..1024");
  const std::string fits = write_reference("fits.safetensors", 1021);
  const CliResult r = run_cli("check-logits --model " + ckpt.string() + " --expected " + fits);
  EXPECT_EQ(r.out.find("a context of"), std::string::npos) << r.out;
  // The verdict's options are checked before the reference is read, on every build.
  expect_one_line(
      run_cli("check-logits --model " + ckpt.string() + " --expected " + fits + " --bf16-cap 0"),
      "--bf16-cap", "--bf16-cap: expected a finite value > 0, found 0");
}

}  // namespace
}  // namespace megaops
