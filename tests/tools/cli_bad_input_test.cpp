// The bad-input catalogue, as a user meets it: each broken checkpoint or config given to
// `megaops generate` must end in exactly one error line naming the file and the field, and exit
// status 1 — never a crash, a hang or a second line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "io/text_file.h"
#include "models/checkpoint.h"
#include "models/model_config.h"
#include "tools/cli_util.h"

namespace megaops {
namespace {

namespace fs = std::filesystem;
using testing::count_lines;
using testing::run_cli;

struct BadCase {
  std::string name;
  // Breaks the checkpoint in `dir` (a valid tiny-llama3 checkpoint when called).
  std::function<void(const fs::path& dir)> corrupt;
  std::vector<std::string> must_mention;  // the file and the field
};

// Names the case in test listings instead of a byte dump of the struct.
void PrintTo(const BadCase& c, std::ostream* os) {
  *os << c.name;
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << text;
}

// A safetensors file with this JSON header and `data_bytes` zero bytes of data.
void write_raw_safetensors(const fs::path& p, const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  uint64_t len = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  out += header;
  out.append(data_bytes, '\0');
  write_text(p, out);
}

// Rewrites model.safetensors keeping the tensors `keep` accepts, with `edit` applied to each.
void rewrite_tensors(const fs::path& dir, const std::function<bool(const TensorView&)>& keep,
                     const std::function<void(TensorToWrite&)>& edit = {}) {
  const fs::path file = dir / "model.safetensors";
  std::vector<std::vector<uint8_t>> data;
  std::vector<TensorToWrite> out;
  {
    auto st = SafetensorsFile::open(file.string());
    for (const TensorView& t : st->tensors()) {
      if (!keep(t)) continue;
      data.emplace_back(t.data, t.data + t.nbytes);
      out.push_back({t.name, t.dtype, t.shape, nullptr, t.nbytes});
    }
  }
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].data = data[i].data();
    if (edit) edit(out[i]);
  }
  write_safetensors(file.string(), out);
}

void edit_config(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(read_text_file((dir / "config.json").string()));
  edit(j);
  write_text(dir / "config.json", j.dump(2));
}

const std::string EMBED = "model.embed_tokens.weight";
const std::string Q0 = "model.layers.0.self_attn.q_proj.weight";
const std::string DOWN1 = "model.layers.1.mlp.down_proj.weight";

// Rewrites model.safetensors with the values of tensor `name` at `indices` replaced by `value`
// (any dtype: the bytes are decoded, edited and encoded again).
void plant_value(const fs::path& dir, const std::string& name, const std::vector<size_t>& indices,
                 float value) {
  std::vector<uint8_t> edited;
  rewrite_tensors(
      dir, [](const TensorView&) { return true; },
      [&](TensorToWrite& t) {
        if (t.name != name) return;
        const size_t n = t.nbytes / dtype_size(t.dtype);
        std::vector<float> f(n);
        to_float(t.dtype, t.data, f.data(), n);
        if (indices.empty()) std::fill(f.begin(), f.end(), value);
        for (size_t i : indices) f[i] = value;
        edited.resize(t.nbytes);
        from_float(t.dtype, f.data(), edited.data(), n);
        t.data = edited.data();
      });
}

std::vector<BadCase> catalogue() {
  return {
      {"EmptyFile",
       [](const fs::path& d) { write_text(d / "model.safetensors", ""); },
       {"model.safetensors"}},
      {"TruncatedHeader",
       [](const fs::path& d) {
         write_text(d / "model.safetensors", std::string("\xff\x00\x00\x00\x00\x00\x00\x00{", 9));
       },
       {"model.safetensors", "header"}},
      {"HeaderNotAnObject",
       [](const fs::path& d) { write_raw_safetensors(d / "model.safetensors", "[1, 2, 3]", 0); },
       {"model.safetensors", "object"}},
      {"OffsetsOutOfRange",
       [](const fs::path& d) {
         write_raw_safetensors(d / "model.safetensors",
                               R"({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
                               8);
       },
       {"model.safetensors", "data_offsets"}},
      {"OverlappingOffsets",
       [](const fs::path& d) {
         write_raw_safetensors(d / "model.safetensors",
                               R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
                               R"( "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
                               24);
       },
       {"model.safetensors", "overlap"}},
      {"UnsupportedDtype",
       [](const fs::path& d) {
         write_raw_safetensors(d / "model.safetensors",
                               R"({"x": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}})",
                               16);
       },
       {"model.safetensors", "I64"}},
      {"DuplicateTensor",
       [](const fs::path& d) {
         write_raw_safetensors(d / "model.safetensors",
                               R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                               R"( "a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                               16);
       },
       {"model.safetensors", "duplicate"}},
      {"ShapeDisagreesWithConfig",
       [](const fs::path& d) {
         rewrite_tensors(
             d, [](const TensorView&) { return true; },
             [](TensorToWrite& t) {
               if (t.name == Q0) t.shape = {t.shape[1], t.shape[0] / 2, 2};  // same bytes
             });
       },
       {"model.safetensors", Q0, "shape"}},
      {"MissingTensor",
       [](const fs::path& d) {
         rewrite_tensors(d, [](const TensorView& t) { return t.name != Q0; });
       },
       {Q0, "missing"}},
      {"ZeroHiddenSize",
       [](const fs::path& d) { edit_config(d, [](auto& j) { j["hidden_size"] = 0; }); },
       {"config.json", "hidden_size"}},
      {"NegativeLayers",
       [](const fs::path& d) { edit_config(d, [](auto& j) { j["num_hidden_layers"] = -2; }); },
       {"config.json", "num_hidden_layers"}},
      {"HeadsDoNotDivideHidden",
       [](const fs::path& d) {
         edit_config(d, [](auto& j) {
           j.erase("head_dim");
           j["num_attention_heads"] = 3;
           j["num_key_value_heads"] = 1;
         });
       },
       {"config.json", "num_attention_heads"}},
      {"GqaGroupsDoNotDivideHeads",
       [](const fs::path& d) { edit_config(d, [](auto& j) { j["num_key_value_heads"] = 3; }); },
       {"config.json", "num_key_value_heads"}},
      {"ConfigNotJson",
       [](const fs::path& d) { write_text(d / "config.json", "{\"vocab_size\": "); },
       {"config.json"}},
      {"UnsupportedArchitecture",
       [](const fs::path& d) {
         edit_config(d, [](auto& j) { j["architectures"] = {"MistralForCausalLM"}; });
       },
       {"config.json", "MistralForCausalLM"}},
      {"MissingConfig", [](const fs::path& d) { fs::remove(d / "config.json"); }, {"config.json"}},
      // Non-finite weights: the first bad index is named, whatever else follows it.
      {"NanInOneWeight",
       [](const fs::path& d) {
         plant_value(d, DOWN1, {4000, 17}, std::nanf(""));
       },
       {"model.safetensors", DOWN1,
        "expected finite values, found NaN at index 17 (row 0, "
        "column 17)"}},
      {"NanEverywhere",
       [](const fs::path& d) { plant_value(d, Q0, {}, std::nanf("")); },
       {"model.safetensors", Q0, "found NaN at index 0"}},
      {"InfInAnEmbeddingRow",
       [](const fs::path& d) { plant_value(d, EMBED, {5 * 128 + 3}, INFINITY); },
       {"model.safetensors", EMBED, "found +Inf at index 643 (row 5, column 3)"}},
      {"NegativeInfInTheFinalNorm",
       [](const fs::path& d) { plant_value(d, "model.norm.weight", {63}, -INFINITY); },
       {"model.safetensors", "model.norm.weight", "found -Inf at index 63"}},
  };
}

class CliBadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(CliBadInput, OneErrorLineNamingFileAndField) {
  const BadCase& c = GetParam();
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("megaops-bad-" + c.name + "-" + std::to_string(getpid()));
  fs::remove_all(dir);
  write_random_checkpoint(preset_config("tiny-llama3"), dir.string(), 3, DType::BF16, 0, {});
  c.corrupt(dir);
  const auto r = run_cli("generate --cpu --model " + dir.string() + " --prompt-ids 1,2");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_EQ(r.out.rfind("error: ", 0), 0u) << r.out;
  for (const std::string& word : c.must_mention)
    EXPECT_NE(r.out.find(word), std::string::npos) << "missing '" << word << "' in: " << r.out;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Catalogue, CliBadInput, ::testing::ValuesIn(catalogue()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace megaops

namespace megaops {
namespace {

// The plan catalogue: a broken --plan file, or a plan beside a flag it replaces, is one error
// line naming the file (or the flag) and the field, before any model loads, in every command
// that runs a decode step. A region naming an op the model lacks is checked against the
// executor's op names once it is built (GPU; graph/plan.h check_plan_regions has the CPU test).
struct BadPlanCase {
  std::string name;
  std::string plan_text;  // written to the plan file; empty: no file
  std::string extra;      // more arguments
  std::vector<std::string> must_mention;
};

TEST(CliBadPlan, OneErrorLineNamingFileAndField) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("megaops-badplan-" + std::to_string(getpid()));
  fs::remove_all(dir);
  write_random_checkpoint(preset_config("tiny-llama3"), dir.string(), 3, DType::BF16, 0, {});
  const std::string plan = (dir / "plan.json").string();
  const std::string ok = R"({"format": "megaops-plan", "version": 1})";
  const std::vector<BadPlanCase> cases = {
      {"MissingFile", "", "", {plan}},
      {"NotJson", "{\"format\": ", "", {plan, "not valid JSON"}},
      {"OldPlannerFormat",
       R"({"model": "tiny-llama3", "batch": 1, "regions": []})",
       "",
       {plan, "format: missing"}},
      {"UnknownKey",
       R"({"format": "megaops-plan", "version": 1, "decode": {"pdll": true}})",
       "",
       {plan, "decode.pdll: unknown key"}},
      {"UnknownBackend",
       R"({"format": "megaops-plan", "version": 1, "decode": {"backend": "fast"}})",
       "",
       {plan, "decode.backend: expected conventional, pdl_chain or overlap, found \"fast\""}},
      {"WrongVersion", R"({"format": "megaops-plan", "version": 7})", "", {plan, "version"}},
      {"RegionOfAnotherBackend",
       R"({"format": "megaops-plan", "version": 1, "decode": {"backend": "overlap",
           "regions": [{"first_op": "embedding", "backend": "pdl_chain"}]}})",
       "",
       {plan, "decode.regions[0].backend", "found \"pdl_chain\""}},
      {"CoRunningRegions",
       R"({"format": "megaops-plan", "version": 1, "decode": {"backend": "overlap",
           "sharing": {"policy": "fixed_split", "split": 66}}})",
       "",
       {plan, "decode.sharing.policy", "found fixed_split"}},
      {"PlanWithPdl", ok, "--pdl", {"--pdl: cannot be combined with --plan (set decode.pdl"}},
      {"PlanWithBackend", ok, "--backend overlap", {"--backend: cannot be combined with --plan"}},
      {"PlanWithMatmulPath",
       ok,
       "--matmul-path small",
       {"--matmul-path: cannot be combined with --plan (set decode.matmul.path"}},
      {"PlanWithCpu", ok, "--cpu", {"--plan: cannot be combined with --cpu"}},
      {"UnknownPrefillAttention",
       R"({"format": "megaops-plan", "version": 1, "prefill": {"attention": "sdpa"}})",
       "",
       {plan, "prefill.attention: expected flash or cudnn, found \"sdpa\""}},
      {"PlanWithPrefillAttention",
       ok,
       "--prefill-attention cudnn",
       {"--prefill-attention: cannot be combined with --plan (set prefill.attention"}},
  };
  for (const BadPlanCase& c : cases) {
    fs::remove(plan);
    if (!c.plan_text.empty()) write_text(plan, c.plan_text);
    const auto r = run_cli("generate --model " + dir.string() + " --prompt-ids 1,2 --plan " + plan +
                           " " + c.extra);
    EXPECT_EQ(r.status, 1) << c.name << ": " << r.out;
    EXPECT_EQ(count_lines(r.out), 1) << c.name << ": " << r.out;
    EXPECT_EQ(r.out.rfind("error: ", 0), 0u) << c.name << ": " << r.out;
    for (const std::string& word : c.must_mention)
      EXPECT_NE(r.out.find(word), std::string::npos)
          << c.name << ": missing '" << word << "' in: " << r.out;
  }
  // bench, profile and trace read the plan before they look for a GPU.
  write_text(plan, R"({"format": "megaops-plan", "version": 1, "decode": {"backend": "fast"}})");
  for (const std::string cmd : {"bench", "profile", "trace"}) {
    const auto r = run_cli(cmd + " --preset tiny-llama3 --plan " + plan);
    EXPECT_EQ(r.status, 1) << cmd << ": " << r.out;
    EXPECT_EQ(count_lines(r.out), 1) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find(plan + ": decode.backend"), std::string::npos) << cmd << ": " << r.out;
  }
  // chat and check-logits too, before the checkpoint or the reference is read.
  for (const std::string cmd :
       {"chat --model " + dir.string(),
        "check-logits --model " + dir.string() + " --expected /nonexistent"}) {
    const auto r = run_cli(cmd + " --plan " + plan + " < /dev/null");
    EXPECT_EQ(r.status, 1) << cmd << ": " << r.out;
    EXPECT_EQ(count_lines(r.out), 1) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find(plan + ": decode.backend"), std::string::npos) << cmd << ": " << r.out;
  }
  write_text(plan, ok);
  {
    const auto r =
        run_cli("chat --model " + dir.string() + " --cpu --plan " + plan + " < /dev/null");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("--plan: cannot be combined with --cpu"), std::string::npos) << r.out;
  }
  {
    const auto r = run_cli("check-logits --model " + dir.string() +
                           " --expected /nonexistent --pdl --plan " + plan);
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_EQ(count_lines(r.out), 1) << r.out;
    EXPECT_NE(r.out.find("--pdl: cannot be combined with --plan"), std::string::npos) << r.out;
  }
  for (const auto& [cmd, flag] :
       std::vector<std::pair<std::string, std::string>>{{"bench", "--overlap-streams 1"},
                                                        {"profile", "--matmul-tune 1"},
                                                        {"trace", "--streams 1"}}) {
    const auto r = run_cli(cmd + " --preset tiny-llama3 --plan " + plan + " " + flag);
    EXPECT_EQ(r.status, 1) << cmd << ": " << r.out;
    EXPECT_EQ(count_lines(r.out), 1) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find(flag.substr(0, flag.find(' ')) + ": cannot be combined with --plan"),
              std::string::npos)
        << cmd << ": " << r.out;
  }
  // trace records the overlap step: a conventional plan has nothing to trace.
  {
    const auto r = run_cli("trace --preset tiny-llama3 --plan " + plan);
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_EQ(count_lines(r.out), 1) << r.out;
    EXPECT_NE(r.out.find(plan + ": decode.backend: trace records the overlap step"),
              std::string::npos)
        << r.out;
  }
  // A valid plan on the CPU oracle (no GPU here, or --cpu refused above): said, not run.
  if (!fs::exists("/dev/nvidia0")) {
    const auto r = run_cli("generate --model " + dir.string() + " --prompt-ids 1,2 --plan " + plan +
                           " --max-new-tokens 2");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("plan: " + plan + " (conventional, pdl off), not run"), std::string::npos)
        << r.out;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace megaops
