// One row of the op table (tests/ops/op_harness_test.cu): an op, or a fold of two ops, on one
// shape, and what every row shares: seeded random bf16 inputs built in parallel (the presets'
// weights are up to 622 M values), the CPU oracle run row-parallel, and the checks that an output
// was fully written (every output starts as NaN) and is within the op's tolerance.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/parallel.h"
#include "gpu_test_util.h"
#include "graph/model_config.h"
#include "reference/ops.h"

namespace megaops::testing {

// The dimensions an op takes from a model: a preset's, or an odd one made to hit what the presets
// do not (hidden 8 x odd, vocabularies that are no multiple of anything, one query head per kv
// head).
struct OpModel {
  std::string label;  // [A-Za-z0-9_]: part of the test name
  ModelConfig cfg;
};

// Input variants of an op: which delta add_rmsnorm adds, in which dtype qkv_rope and silu_mul read
// their input, which path a matmul takes, which kernel merges decode attention's splits.
enum class OpVariant {
  None,
  Bf16In,
  F32In,
  SmallM,
  Stream,
  StreamBulk,
  CublasLt,
  Dispatch,
  MergeInKernel,
  CombineKernel,
  Scalar,
  Flash,
  NormFold,
  NonFinite,
};

struct OpCase;
struct OpEnv {
  std::mt19937_64 rng;
};
using OpRunner = void (*)(const OpCase&, OpEnv&);

struct OpCase {
  std::string op;     // "embedding", "matmul_small_m_qkv", ...: the first part of the test name
  std::string shape;  // "b33", "m2_n6144_k4096", ...: the last part, after the model's label
  OpModel model;
  OpRunner run = nullptr;
  OpVariant variant = OpVariant::None;
  int batch = 1;  // rows, tokens, sequences or m
  int ctx = 0;    // attention: the longest context
  int n = 0, k = 0;
  bool y_f32 = false;  // matmul output dtype
  bool pdl = false;

  std::string name() const { return op + "_" + model.label + "_" + shape; }
};

// What gtest prints for a failing row's parameter: its name, not its bytes.
inline void PrintTo(const OpCase& c, std::ostream* os) {
  *os << c.name();
}

// n bf16 values uniform on [lo, hi) as bits and as the floats they hold. Chunks of 2^20 values
// each draw from their own generator seeded by (seed, chunk), so the values depend on the seed
// only, not on how many threads build them.
struct Bf16Values {
  std::vector<uint16_t> bits;
  std::vector<float> f;
};
inline Bf16Values random_bf16(size_t n, float lo, float hi, std::mt19937_64& rng) {
  constexpr size_t CHUNK = size_t(1) << 20;
  const uint64_t seed = rng();
  Bf16Values v;
  v.bits.resize(n);
  v.f.resize(n);
  const size_t chunks = (n + CHUNK - 1) / CHUNK;
  parallel_for(chunks, 1, [&](size_t c0, size_t c1) {
    for (size_t c = c0; c < c1; ++c) {
      std::mt19937_64 g(seed + 0x9e3779b97f4a7c15ull * (c + 1));
      const size_t end = std::min(n, (c + 1) * CHUNK);
      for (size_t i = c * CHUNK; i < end; ++i) {
        const float u = static_cast<float>(g() >> 40) * 0x1p-24f;  // [0, 1)
        v.bits[i] = float_to_bf16(lo + (hi - lo) * u);
        v.f[i] = bf16_to_float(v.bits[i]);
      }
    }
  });
  return v;
}

// y [m, n] = x [m, k] . w [n, k]^T by ref::matmul, slices of n on separate threads.
inline std::vector<float> ref_matmul(const std::vector<float>& x, const std::vector<float>& w,
                                     int m, int n, int k) {
  std::vector<float> y(size_t(m) * n);
  parallel_for(size_t(n), 64, [&](size_t j0, size_t j1) {
    for (int r = 0; r < m; ++r)
      ref::matmul(x.data() + size_t(r) * k, w.data() + j0 * k, y.data() + size_t(r) * n + j0, 1, k,
                  static_cast<int>(j1 - j0));
  });
  return y;
}

// The index of the first NaN or Inf in v, or -1. Outputs start as NaN, so an element a kernel did
// not write shows up here as well as one it wrote wrong.
inline int64_t first_nonfinite(const std::vector<float>& v) {
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i])) return static_cast<int64_t>(i);
  return -1;
}

// got was fully written, holds no NaN or Inf, and is within tol of want (||got - want|| /
// ||want||, DESIGN.md's measure).
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const int64_t bad = first_nonfinite(got);
  ASSERT_EQ(bad, -1) << what << ": element " << bad << " not written, or NaN / Inf";
  EXPECT_LE(rel_error(got.data(), want.data(), got.size()), tol) << what;
}

}  // namespace megaops::testing
