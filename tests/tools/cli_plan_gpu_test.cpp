// `megaops plan` plans for the GPU its evidence was measured on and writes that GPU into the plan;
// evidence from several GPUs is one error line. The evidence here is a committed H200 profile of
// llama3.2-1b batch 1 and the same profile as an H100 would have written it (another name, its
// ceiling and SMs, slower ops).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tools/cli_util.h"

namespace {

namespace fs = std::filesystem;
using megaops::testing::count_lines;
using megaops::testing::run_cli;

const std::string PROFILE_1B =
    std::string(MEGAOPS_SOURCE_DIR) + "/bench/results/2026-11-29-70bc941/profile_llama3.2-1b.json";
const char* H100 = "NVIDIA H100 80GB HBM3";

double number_after(const std::string& out, const std::string& label) {
  const size_t at = out.find(label);
  return at == std::string::npos ? -1.0 : std::stod(out.substr(at + label.size()));
}

struct TempFiles {
  std::string tag = std::to_string(getpid());
  fs::path dir = fs::path(::testing::TempDir());
  fs::path path(const std::string& name) const { return dir / ("megaops-" + tag + "-" + name); }
  ~TempFiles() {
    std::error_code ec;
    for (const char* n : {"h100.json", "plan.json", "h200-plan.json"}) fs::remove(path(n), ec);
  }
};

TEST(CliPlanGpu, AnH100ProfileIsUsedAndThePlanNamesItsGpu) {
  const TempFiles tmp;
  nlohmann::json prof = nlohmann::json::parse(std::ifstream(PROFILE_1B));
  prof["gpu"] = H100;
  prof["hbm_read_ceiling_gbps"] = 3170.0;
  prof["sms"] = 132;
  double sum = 0;
  for (auto& op : prof["ops"]) {
    op["us"] = op["us"].get<double>() * 1.3;
    sum += op["us"].get<double>();
  }
  prof["step_us"] = sum;
  std::ofstream(tmp.path("h100.json")) << prof.dump();

  const auto h100 =
      run_cli("plan --preset llama3.2-1b --batch 1 --top 1 --profile " +
              tmp.path("h100.json").string() + " --out " + tmp.path("plan.json").string());
  ASSERT_EQ(h100.status, 0) << h100.out;
  EXPECT_NE(h100.out.find(std::string("plan: for ") + H100), std::string::npos) << h100.out;
  EXPECT_NE(h100.out.find("3170 GB/s, 132 SMs"), std::string::npos) << h100.out;
  EXPECT_EQ(h100.out.find("no matching evidence"), std::string::npos) << h100.out;
  // The all-conventional baseline reproduces the H100 profile's step, not the H200's (within
  // 0.5%: an op measured faster than the H100's ceiling lets it load its bytes keeps its model
  // time).
  EXPECT_NEAR(number_after(h100.out, "all-conventional baseline "), sum, 5e-3 * sum) << h100.out;
  const nlohmann::json plan = nlohmann::json::parse(std::ifstream(tmp.path("plan.json")));
  EXPECT_EQ(plan["gpu"], H100) << plan;

  const auto h200 = run_cli("plan --preset llama3.2-1b --batch 1 --top 1 --profile " + PROFILE_1B +
                            " --out " + tmp.path("h200-plan.json").string());
  ASSERT_EQ(h200.status, 0) << h200.out;
  EXPECT_EQ(h200.out.find("no matching evidence"), std::string::npos) << h200.out;
  EXPECT_GT(number_after(h100.out, "all-conventional baseline "),
            1.2 * number_after(h200.out, "all-conventional baseline "));
  const nlohmann::json p200 = nlohmann::json::parse(std::ifstream(tmp.path("h200-plan.json")));
  EXPECT_EQ(p200["gpu"], "NVIDIA H200") << p200;
  EXPECT_GT(plan["predicted_us"].get<double>(), p200["predicted_us"].get<double>());

  // Both profiles at once: one error line naming the two GPUs.
  const auto mixed = run_cli("plan --preset llama3.2-1b --batch 1 --profile " + PROFILE_1B +
                             " --profile " + tmp.path("h100.json").string());
  EXPECT_EQ(mixed.status, 1) << mixed.out;
  EXPECT_EQ(count_lines(mixed.out), 1) << mixed.out;
  EXPECT_NE(mixed.out.find("gpu: expected evidence from one GPU"), std::string::npos) << mixed.out;
  EXPECT_NE(mixed.out.find(H100), std::string::npos) << mixed.out;
  EXPECT_NE(mixed.out.find("NVIDIA H200"), std::string::npos) << mixed.out;
}

// The GPU flags: a GPU no evidence names needs its ceiling and SMs; bad values are one line
// naming the flag.
TEST(CliPlanGpu, FlagsNameTheGpuAndBadOnesAreOneLine) {
  const auto flags = run_cli(
      "plan --preset llama3.2-1b --batch 1 --top 0 --gpu \"NVIDIA H100 PCIe\" --hbm-gbps 2000 "
      "--sms 114");
  ASSERT_EQ(flags.status, 0) << flags.out;
  EXPECT_NE(flags.out.find("plan: for NVIDIA H100 PCIe (--gpu): HBM read ceiling 2000 GB/s, 114 "
                           "SMs"),
            std::string::npos)
      << flags.out;
  for (const auto& [args, name] :
       {std::pair<std::string, std::string>{"--gpu \"NVIDIA H100 PCIe\"", "--hbm-gbps"},
        {"--gpu \"NVIDIA H100 PCIe\" --hbm-gbps 2000", "--sms"},
        {"--hbm-gbps 0", "--hbm-gbps"},
        {"--sms 0", "--sms"},
        {"--gpu \"\"", "--gpu"}}) {
    const auto r = run_cli("plan --preset llama3.2-1b --batch 1 --top 0 " + args);
    EXPECT_EQ(r.status, 1) << args << ": " << r.out;
    EXPECT_EQ(count_lines(r.out), 1) << args << ": " << r.out;
    EXPECT_EQ(r.out.find("error: " + name), 0u) << args << ": " << r.out;
  }
}

}  // namespace
