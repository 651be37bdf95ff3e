// What the non-finite check costs a checkpoint load: every expected weight of a checkpoint
// directory converted to fp32 as the executor's loader does it (Checkpoint::weight_to_f32: on all
// cores, each value checked as it converts) against the same conversion without the check, in
// alternated rounds (the first round, which faults the mapped files in, is not counted). Prints
// one JSON object: median ms of each, GB/s of checkpoint bytes, and the check's share.
//   megaops_weight_check_bench --model DIR [--rounds 5]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "models/checkpoint.h"

namespace {

using megaops::Checkpoint;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Converts every expected weight into `buf` (reused); returns milliseconds.
template <typename Convert>
double convert_all(const Checkpoint& ckpt, std::vector<float>& buf, Convert convert) {
  const auto t0 = std::chrono::steady_clock::now();
  for (const megaops::WeightSpec& spec : megaops::expected_weights(ckpt.config())) {
    const megaops::TensorView& t = ckpt.weight(spec.name);
    buf.resize(t.numel());
    convert(spec.name, t, buf.data());
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string model;
  int rounds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--model") == 0) model = argv[i + 1];
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::max(1, std::atoi(argv[i + 1]));
  }
  if (model.empty()) {
    std::fprintf(stderr, "usage: %s --model DIR [--rounds N]\n", argv[0]);
    return 2;
  }
  try {
    const Checkpoint ckpt = Checkpoint::open(model);
    std::vector<float> buf;
    auto plain = [](const std::string&, const megaops::TensorView& t, float* out) {
      megaops::parallel_for(t.numel(), size_t{1} << 20, [&](size_t b, size_t e) {
        megaops::to_float(t.dtype, t.data + b * megaops::dtype_size(t.dtype), out + b, e - b);
      });
    };
    auto checked = [&ckpt](const std::string& name, const megaops::TensorView&, float* out) {
      ckpt.weight_to_f32(name, out);
    };
    convert_all(ckpt, buf, plain);  // faults the mapped files in
    std::vector<double> plain_ms, checked_ms;
    for (int r = 0; r < rounds; ++r) {  // alternated, the order swapped every round
      if (r % 2 == 0) plain_ms.push_back(convert_all(ckpt, buf, plain));
      checked_ms.push_back(convert_all(ckpt, buf, checked));
      if (r % 2 == 1) plain_ms.push_back(convert_all(ckpt, buf, plain));
    }
    const double gb = ckpt.total_bytes() / 1e9;
    const double p = median(plain_ms), c = median(checked_ms);
    nlohmann::json j = {{"model", model},
                        {"checkpoint_gb", gb},
                        {"rounds", rounds},
                        {"threads", std::max(1u, std::thread::hardware_concurrency())},
                        {"plain_ms", p},
                        {"checked_ms", c},
                        {"plain_gbps", gb / (p / 1e3)},
                        {"checked_gbps", gb / (c / 1e3)},
                        {"check_overhead_pct", 100.0 * (c - p) / p},
                        {"plain_ms_all", plain_ms},
                        {"checked_ms_all", checked_ms}};
    std::printf("%s\n", j.dump(2).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
