// The prefill benchmarks' options (`bench-attention`, `bench-matmul --prefill-tokens`): each is
// checked before any GPU work, so on any machine a bad one is one error line naming it and exit
// status 1.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <utility>

#include "tools/cli_util.h"

namespace {

using megaops::testing::count_lines;
using megaops::testing::run_cli;

void expect_each_bad_option(const std::string& command,
                            std::initializer_list<std::pair<const char*, const char*>> cases) {
  for (const auto& [args, names] : cases) {
    const megaops::testing::CliResult r = run_cli(command + " " + args);
    EXPECT_EQ(r.status, 1) << args << ": " << r.out;
    EXPECT_EQ(count_lines(r.out), 1) << args << ": " << r.out;
    EXPECT_NE(r.out.find(names), std::string::npos) << args << ": " << r.out;
  }
}

TEST(CliPrefillBench, BenchAttentionBadOptions) {
  expect_each_bad_option("bench-attention", {{"--kernels flash,bogus", "--kernels"},
                                             {"--tokens 0", "--tokens"},
                                             {"--tokens 1024,x", "--tokens"},
                                             {"--repeats 0", "--repeats"},
                                             {"--ceiling-n 100", "--ceiling-n"},
                                             {"--preset no-such-model", "no-such-model"}});
}

TEST(CliPrefillBench, BenchMatmulPrefillBadOptions) {
  expect_each_bad_option("bench-matmul", {{"--prefill-tokens 0", "--prefill-tokens"},
                                          {"--prefill-tokens 512,x", "--prefill-tokens"},
                                          {"--prefill-paths lt-bf16,bogus", "--prefill-paths"},
                                          {"--ceiling-n 7", "--ceiling-n"}});
}

}  // namespace
