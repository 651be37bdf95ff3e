// Tests of the matmul launchers (small-m kernel, cuBLASLt path, dispatch) against the fp32 CPU
// reference, on awkward shapes, strided operands, PDL chains and CUDA graph replay; the norm and
// the SwiGLU folded into the bulk streaming kernel against the unfolded ops; and a smoke
// test of the HBM read ceiling helper that benchmarks report against.
//
// Tolerances (‖out − ref‖ / ‖ref‖, the reference fed the same bf16-rounded inputs):
// - bf16 output: 2e-2 (DESIGN.md's bf16 bound; rounding the output alone costs ~2^-9 ≈ 2e-3);
// - fp32 output: 1e-3. The inputs are exact in both; what differs is the summation order and the
//   tensor cores' fp32 accumulation, which is not IEEE round-to-nearest. Its error grows like
//   sqrt(k) · 2^-22 or so, ~1e-5 at k = 4096; 1e-3 leaves room while still catching a dropped or
//   doubled k block (≥ 1/16 of a row at the shapes below).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/sampling.h"
#include "gpu_test_util.h"
#include "kernels/greedy_key.cuh"
#include "kernels/hbm_read.cuh"
#include "kernels/matmul.cuh"
#include "kernels/matmul_stream.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/silu_mul.cuh"
#include "reference/ops.h"

namespace megaops {
namespace {

using testing::DeviceBuffer;
using testing::from_bf16_bits;
using testing::random_floats;
using testing::rel_error;
using testing::test_seed;
using testing::to_bf16_bits;

constexpr double BF16_OUT_TOL = 2e-2;
constexpr double F32_OUT_TOL = 1e-3;
constexpr uint16_t BF16_NAN_BITS = 0xffff;

enum class Path { SmallM, Stream, CublasLt, Dispatch };

const char* path_name(Path p) {
  return p == Path::SmallM     ? "small_m"
         : p == Path::Stream   ? "stream"
         : p == Path::CublasLt ? "cublaslt"
                               : "dispatch";
}

cudaError_t run_path(MatmulContext& ctx, Path path, const MatmulParams& p) {
  switch (path) {
    case Path::SmallM:
      return ctx.run_small_m(p);
    case Path::Stream:
      return ctx.run_stream(p);
    case Path::CublasLt:
      return ctx.run_cublaslt(p);
    default:
      return ctx.run(p);
  }
}

// One problem: bf16-rounded random inputs on host and device, and the fp32 reference output.
// x padding columns (ldx > k) hold bf16 NaN, so a kernel that reads them fails the comparison.
struct Problem {
  int m, n, k;
  int64_t ldx, ldy;
  std::vector<float> x;  // [m, k] compact, bf16-rounded
  std::vector<float> w;  // [n, k]
  std::vector<float> ref;
  DeviceBuffer<uint16_t> x_dev;
  DeviceBuffer<uint16_t> w_dev;

  Problem(int m_, int n_, int k_, int64_t ldx_, int64_t ldy_, std::mt19937_64& rng)
      : m(m_),
        n(n_),
        k(k_),
        ldx(ldx_),
        ldy(ldy_),
        x(random_floats(size_t(m_) * k_, -1.f, 1.f, rng)),
        w(random_floats(size_t(n_) * k_, -1.f, 1.f, rng)),
        ref(size_t(m_) * n_),
        x_dev(size_t(m_) * ldx_),
        w_dev(size_t(n_) * k_) {
    round_to_bf16(x.data(), x.size());
    round_to_bf16(w.data(), w.size());
    ref::matmul(x.data(), w.data(), ref.data(), m, k, n);
    upload_x();
    w_dev.upload(to_bf16_bits(w));
  }

  void upload_x() {
    std::vector<uint16_t> bits(size_t(m) * ldx, BF16_NAN_BITS);
    const std::vector<uint16_t> compact = to_bf16_bits(x);
    for (int r = 0; r < m; ++r)
      std::memcpy(&bits[size_t(r) * ldx], &compact[size_t(r) * k], size_t(k) * sizeof(uint16_t));
    x_dev.upload(bits);
  }

  // New x values (same shape), reference recomputed: for graph replays that must see new inputs.
  void refresh_x(std::mt19937_64& rng) {
    x = random_floats(x.size(), -1.f, 1.f, rng);
    round_to_bf16(x.data(), x.size());
    ref::matmul(x.data(), w.data(), ref.data(), m, k, n);
    upload_x();
  }

  MatmulParams params(void* y, DType y_dtype, bool pdl, cudaStream_t stream = nullptr) const {
    MatmulParams p;
    p.x = reinterpret_cast<const bf16*>(x_dev.ptr);
    p.ldx = ldx;
    p.w = reinterpret_cast<const bf16*>(w_dev.ptr);
    p.y = y;
    p.ldy = ldy;
    p.y_dtype = y_dtype;
    p.m = m;
    p.n = n;
    p.k = k;
    p.launch.stream = stream;
    p.launch.pdl = pdl;
    return p;
  }
};

// A poisoned [m, ldy] output of either dtype.
struct Output {
  DType dtype;
  size_t elems;
  DeviceBuffer<uint8_t> buf;
  Output(DType t, int m, int64_t ldy)
      : dtype(t), elems(size_t(m) * ldy), buf(elems * dtype_size(t)) {
    buf.poison();
  }
};

// Compares the [m, n] block with the reference and checks that the ldy padding kept its poison.
void expect_matches(const Problem& pr, const Output& out, const char* what) {
  const std::vector<uint8_t> raw = out.buf.download();
  std::vector<float> got(size_t(pr.m) * pr.n);
  bool padding_intact = true;
  for (int r = 0; r < pr.m; ++r) {
    for (int64_t c = 0; c < pr.ldy; ++c) {
      const size_t i = size_t(r) * pr.ldy + c;
      float v;
      if (out.dtype == DType::F32) {
        std::memcpy(&v, &raw[i * 4], 4);
      } else {
        uint16_t h;
        std::memcpy(&h, &raw[i * 2], 2);
        v = bf16_to_float(h);
      }
      if (c < pr.n) {
        got[size_t(r) * pr.n + c] = v;
      } else {
        for (size_t b = 0; b < dtype_size(out.dtype); ++b)
          padding_intact &= raw[i * dtype_size(out.dtype) + b] == 0xff;
      }
    }
  }
  const double tol = out.dtype == DType::F32 ? F32_OUT_TOL : BF16_OUT_TOL;
  const double err = rel_error(got.data(), pr.ref.data(), got.size());
  EXPECT_LE(err, tol) << what << " m=" << pr.m << " n=" << pr.n << " k=" << pr.k
                      << " ldx=" << pr.ldx << " ldy=" << pr.ldy << " y=" << dtype_name(out.dtype);
  EXPECT_TRUE(padding_intact) << what << ": wrote past n into the ldy padding";
}

void check_path(MatmulContext& ctx, const Problem& pr, Path path, DType y_dtype, bool pdl) {
  Output out(y_dtype, pr.m, pr.ldy);
  ASSERT_EQ(run_path(ctx, path, pr.params(out.buf.ptr, y_dtype, pdl)), cudaSuccess)
      << path_name(path) << " m=" << pr.m << " n=" << pr.n << " k=" << pr.k;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_matches(pr, out, path_name(path));
}

// Replays a captured graph `replays` times, each on fresh x values with poisoned outputs, and
// checks every (problem, output) against the reference.
struct Checked {
  Problem* pr;
  Output* out;
  const char* what;
};
void replay_and_check(cudaGraphExec_t exec, cudaStream_t stream, std::mt19937_64& rng,
                      const std::vector<Checked>& cases, int replays) {
  for (int replay = 0; replay < replays; ++replay) {
    for (const Checked& c : cases) {
      c.pr->refresh_x(rng);
      c.out->buf.poison();
    }
    // Uploads and memsets ran on the legacy stream, which does not order with a non-blocking one.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    SCOPED_TRACE("replay " + std::to_string(replay));
    for (const Checked& c : cases) expect_matches(*c.pr, *c.out, c.what);
  }
}

const int SWEEP_M[] = {1, 3, 7, 16, 33, 64};
// n = 4500: more 16-row tiles (282) than the persistent grid of 2 CTAs per SM has on an H200.
const int SWEEP_KN[][2] = {{8, 8}, {24, 5}, {2056, 111}, {2048, 3072}, {4096, 500}, {1000, 4500}};

TEST(MatmulTest, SmallMMatchesReferenceOnAwkwardShapes) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  MatmulContext ctx;
  for (int m : SWEEP_M) {
    for (const auto& kn : SWEEP_KN) {
      const Problem pr(m, kn[1], kn[0], kn[0], kn[1], rng);
      for (DType t : {DType::BF16, DType::F32}) {
        for (bool pdl : {false, true}) {
          SCOPED_TRACE(pdl ? "pdl" : "no pdl");
          check_path(ctx, pr, Path::SmallM, t, pdl);
        }
      }
    }
  }
}

// The streaming kernel on every m it takes, k not a multiple of its 1024-wide stage, n not a
// multiple of its 8-row block, more row blocks than CTAs (n = 4500: 563 blocks), k = 14336 (the 8B
// down projection: 14 stages per row block), and ring sizes from the smallest to the largest.
// Both versions: the cp.async ring and (on sm_90) the bulk copies from a producer warp.
std::vector<bool> stream_versions() {
  std::vector<bool> v{false};
  if (matmul_stream_bulk_supported()) v.push_back(true);
  return v;
}

TEST(MatmulTest, StreamMatchesReferenceOnAwkwardShapes) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 7);
  for (const bool bulk : stream_versions())
    for (int stages : {0, 2, 3, 16}) {
      SCOPED_TRACE(std::string(bulk ? "bulk" : "ring") + " stages " + std::to_string(stages));
      MatmulContext ctx;
      ctx.set_stream_stages(stages);
      ctx.set_stream_bulk(bulk);
      for (int m = 1; m <= MATMUL_STREAM_M_MAX; ++m) {
        std::vector<std::array<int, 2>> kn;
        for (const auto& s : SWEEP_KN) kn.push_back({s[0], s[1]});
        kn.push_back({14336, 300});
        kn.push_back({3080, 4500});
        for (const auto& [k, n] : kn) {
          if (!matmul_stream_fits(m, k)) continue;
          const Problem pr(m, n, k, k, n, rng);
          for (DType t : {DType::BF16, DType::F32}) {
            for (bool pdl : {false, true}) {
              SCOPED_TRACE(pdl ? "pdl" : "no pdl");
              check_path(ctx, pr, Path::Stream, t, pdl);
            }
          }
        }
      }
    }
}

// The bulk version copies neither rows past n nor k past its end, so its ring slots hold stale
// bytes there; a launch whose weights are all NaN first fills every slot of every CTA's ring
// with NaN, and the awkward shapes after it (k tails of 8 and 1032 elements, n tails) must not
// see them. It catches a read of stale bytes only where the next launch's CTAs find the NaN
// left in their shared memory, which CUDA does not promise (in practice shared memory is not
// cleared between kernels); the reference checks of every other stream test stand beside it.
TEST(MatmulTest, StreamBulkNeverReadsStaleRingBytes) {
  MEGAOPS_REQUIRE_GPU();
  if (!matmul_stream_bulk_supported()) GTEST_SKIP() << "bulk copies need an sm_90 GPU";
  std::mt19937_64 rng(test_seed() + 8);
  MatmulContext ctx;
  ctx.set_stream_bulk(true);
  ctx.set_stream_stages(16);
  Problem nan_w(1, 8192, 4096, 4096, 8192, rng);
  nan_w.w_dev.upload(std::vector<uint16_t>(size_t(8192) * 4096, BF16_NAN_BITS));
  for (const auto& [k, n] : std::vector<std::array<int, 2>>{{2056, 111}, {3080, 4500}, {8, 9}}) {
    for (int m = 1; m <= MATMUL_STREAM_M_MAX; ++m) {
      Output sink(DType::F32, 1, 8192);
      ASSERT_EQ(ctx.run_stream(nan_w.params(sink.buf.ptr, DType::F32, false)), cudaSuccess);
      const Problem pr(m, n, k, k, n, rng);
      check_path(ctx, pr, Path::Stream, DType::F32, false);
    }
  }
}

// The bulk version's ring under injected delays (TileSync::delay): the producer issues each stage
// late and every consumer warp releases each slot late, by different random amounts, so a
// consumer reading before a slot's full barrier, or a producer refilling before every warp
// released it, would mix rows of two stages. Small and large rings, k tails, every m, seeds.
TEST(MatmulTest, StreamBulkRingSurvivesInjectedDelays) {
  MEGAOPS_REQUIRE_GPU();
  if (!matmul_stream_bulk_supported()) GTEST_SKIP() << "bulk copies need an sm_90 GPU";
  std::mt19937_64 rng(test_seed() + 9);
  MatmulContext ctx;
  ctx.set_stream_bulk(true);
  int trials = 0;
  for (int stages : {2, 4, 16}) {
    ctx.set_stream_stages(stages);
    for (int m = 1; m <= MATMUL_STREAM_M_MAX; ++m) {
      for (const auto& [k, n] : std::vector<std::array<int, 2>>{{3080, 700}, {14336, 64}}) {
        if (!matmul_stream_fits(m, k)) continue;  // m = 2, k = 14336: x does not fit
        const Problem pr(m, n, k, k, n, rng);
        for (uint64_t seed = 1; seed <= 3; ++seed, ++trials) {
          SCOPED_TRACE("stages " + std::to_string(stages) + " seed " + std::to_string(seed));
          Output out(DType::F32, pr.m, pr.ldy);
          MatmulParams p = pr.params(out.buf.ptr, DType::F32, false);
          p.sync.delay = DelayParams{4000, seed * 7919 + static_cast<uint64_t>(stages)};
          ASSERT_EQ(ctx.run_stream(p), cudaSuccess);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          expect_matches(pr, out, "stream-bulk with delays");
        }
      }
    }
  }
  EXPECT_EQ(trials, 27);  // 3 rings x (2 shapes at m = 1 + 1 at m = 2) x 3 seeds
}

// The first element where two downloads differ bit for bit, or -1.
template <typename T>
int64_t first_bit_difference(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return static_cast<int64_t>(i);
  return -1;
}

// The norm's bf16 output from the GPU (`got`) against the CPU's fp32 one (`want`): within one bf16
// ulp of want each. The two round different fp32 values (the sum of squares in another order, an
// approximate rsqrt) and may land on either side of a rounding boundary; one flip of a large
// channel moves every row of the matmul after it, so the matmul's oracle takes the GPU's x and
// this check holds x itself.
void expect_within_one_bf16_ulp(const std::vector<float>& got, const std::vector<float>& want,
                                const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float ulp = want[i] == 0.f ? 0.f : std::ldexp(1.0f, std::ilogb(want[i]) - 7);
    if (!(std::fabs(got[i] - want[i]) <= ulp) && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " elements more than one bf16 ulp from the CPU's; "
                     << "first " << first << ": " << got[first] << " vs " << want[first];
}

// Whether run_stream(p) takes the dynamic row-block schedule (its footprint says), as `want`: a
// dynamic test whose launch fell back to the static schedule would pass trivially.
void expect_dynamic_schedule(const MatmulContext& ctx, const MatmulParams& p, bool want) {
  KernelFootprint fp;
  ASSERT_EQ(ctx.stream_footprint(p, &fp), cudaSuccess);
  EXPECT_EQ(fp.dynamic_schedule, want) << "the launch's row-block schedule";
}

// A [rows, n] output of `dtype` downloaded as floats.
std::vector<float> download_floats(const Output& out) {
  const std::vector<uint8_t> raw = out.buf.download();
  std::vector<float> v(out.elems);
  for (size_t i = 0; i < v.size(); ++i) {
    if (out.dtype == DType::F32) {
      std::memcpy(&v[i], &raw[i * 4], 4);
    } else {
      uint16_t h;
      std::memcpy(&h, &raw[i * 2], 2);
      v[i] = bf16_to_float(h);
    }
  }
  return v;
}

// What every fold case shares: `unfolded` (x read from memory, y into y_unfolded) and the same
// matmul with `fold_on` applied (x not read, y into y_fold) on the bulk streaming kernel; y must
// match bit for bit, and y_fold the fp32 CPU oracle on x_ref (what the folded op computes in fp32,
// rounded to bf16 here as its kernel rounds it) within the stream tests' tolerance.
template <typename FoldOn>
void expect_fold_matches_unfolded(MatmulContext& ctx, const MatmulParams& unfolded, FoldOn fold_on,
                                  Output& y_unfolded, Output& y_fold, std::vector<float> x_ref,
                                  const std::vector<float>& w) {
  MatmulParams p = unfolded;
  p.y = y_unfolded.buf.ptr;
  ASSERT_EQ(ctx.run_stream(p), cudaSuccess);
  MatmulParams q = p;
  q.x = nullptr;
  q.ldx = 0;
  q.y = y_fold.buf.ptr;
  fold_on(q);
  ASSERT_EQ(ctx.path(q), MatmulPath::Stream);
  ASSERT_EQ(ctx.run_stream(q), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(first_bit_difference(y_fold.buf.download(), y_unfolded.buf.download()), -1)
      << "folded y differs from the unfolded op then the matmul (first differing byte)";
  std::vector<float> ref_y(size_t(p.m) * p.n);
  round_to_bf16(x_ref.data(), x_ref.size());
  ref::matmul(x_ref.data(), w.data(), ref_y.data(), p.m, p.k, p.n);
  const std::vector<float> got = download_floats(y_fold);
  const double tol = p.y_dtype == DType::F32 ? F32_OUT_TOL : BF16_OUT_TOL;
  EXPECT_LE(rel_error(got.data(), ref_y.data(), got.size()), tol);
}

// One folded-norm case (kernels/norm_fold.cuh) on the bulk streaming kernel: (a) add_rmsnorm with
// an fp32 delta on a copy of the residual, then the matmul on its bf16 output; (b) the same matmul
// with the norm folded in, on the original residual, residual_out a separate poisoned buffer. The
// fold promises add_rmsnorm's arithmetic, so y and residual_out must equal (a)'s output and updated
// residual bit for bit; y is also held to the fp32 CPU oracle (norm, bf16 rounding of its output,
// matmul) within the stream tests' tolerance, and r = residual + delta (one fp32 add) exactly.
void check_norm_fold(MatmulContext& ctx, int m, int n, int k, bool with_delta, bool with_out,
                     DType y_dtype, bool pdl, std::mt19937_64& rng,
                     StreamSchedule schedule = StreamSchedule::Auto) {
  SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
               " delta=" + std::to_string(with_delta) +
               " residual_out=" + std::to_string(with_out) + " y=" + dtype_name(y_dtype) +
               " pdl=" + std::to_string(pdl));
  const size_t mk = size_t(m) * k;
  const float eps = 1e-5f;
  // About one huge channel in 512, as real residual streams have: each dominates its thread's
  // partial sum of squares, so a change in the order of the sum moves the total (a flaw the bit
  // checks below can see) far more often than with uniform values.
  std::vector<float> residual = random_floats(mk, -3.f, 3.f, rng);
  std::uniform_int_distribution<size_t> channel(0, mk - 1);
  std::uniform_real_distribution<float> huge(30.f, 100.f);
  for (size_t i = 0; i < mk / 512 + 1; ++i)
    residual[channel(rng)] = (i % 2 ? -1.f : 1.f) * huge(rng);
  const std::vector<float> delta = random_floats(mk, -1.f, 1.f, rng);
  const std::vector<uint16_t> gain_bits = to_bf16_bits(random_floats(k, 0.5f, 1.5f, rng));
  std::vector<float> w = random_floats(size_t(n) * k, -1.f, 1.f, rng);
  round_to_bf16(w.data(), w.size());

  DeviceBuffer<float> res_norm(mk), res_fold(mk), res_out(mk), delta_dev(mk);
  DeviceBuffer<uint16_t> gain_dev(k), w_dev(size_t(n) * k), x_dev(mk);
  res_norm.upload(residual);
  res_fold.upload(residual);
  delta_dev.upload(delta);
  gain_dev.upload(gain_bits);
  w_dev.upload(to_bf16_bits(w));
  res_out.poison();
  x_dev.poison();
  Output y_norm(y_dtype, m, n), y_fold(y_dtype, m, n);
  const bf16* gain = reinterpret_cast<const bf16*>(gain_dev.ptr);

  AddRmsNormParams np;
  np.residual = res_norm.ptr;
  np.delta_f32 = with_delta ? delta_dev.ptr : nullptr;
  np.weight = gain;
  np.out = reinterpret_cast<bf16*>(x_dev.ptr);
  np.rows = m;
  np.n = k;
  np.eps = eps;
  ASSERT_EQ(launch_add_rmsnorm(np), cudaSuccess);
  std::vector<float> r = residual;
  if (with_delta) ref::add(residual.data(), delta.data(), r.data(), mk);
  std::vector<float> xn(mk);
  const std::vector<float> gain_f = from_bf16_bits(gain_bits);
  ref::rmsnorm(r.data(), gain_f.data(), xn.data(), m, k, eps);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> x_gpu = from_bf16_bits(x_dev.download());
  expect_within_one_bf16_ulp(x_gpu, xn, "add_rmsnorm's x");
  // y set here (expect_fold_matches_unfolded sets it again): the footprint check validates it.
  MatmulParams p =
      matmul_params(reinterpret_cast<const bf16*>(x_dev.ptr),
                    reinterpret_cast<const bf16*>(w_dev.ptr), y_norm.buf.ptr, y_dtype, m, n, k);
  p.launch.pdl = pdl;
  p.stream_schedule = schedule;
  if (schedule == StreamSchedule::Dynamic) expect_dynamic_schedule(ctx, p, true);
  expect_fold_matches_unfolded(
      ctx, p,
      [&](MatmulParams& q) {
        q.fold.residual = res_fold.ptr;
        q.fold.delta = with_delta ? delta_dev.ptr : nullptr;
        q.fold.weight = gain;
        q.fold.residual_out = with_out ? res_out.ptr : nullptr;
        q.fold.eps = eps;
      },
      y_norm, y_fold, x_gpu, w);

  const std::vector<float> r_norm = res_norm.download();
  EXPECT_EQ(first_bit_difference(r_norm, r), -1) << "add_rmsnorm's residual != residual + delta";
  const std::vector<float> r_out = res_out.download();
  if (with_out) {
    EXPECT_EQ(first_bit_difference(r_out, r_norm), -1) << "residual_out != add_rmsnorm's residual";
  } else {
    EXPECT_TRUE(std::all_of(r_out.begin(), r_out.end(), [](float v) { return std::isnan(v); }))
        << "residual_out written although null";
  }
  EXPECT_EQ(first_bit_difference(res_fold.download(), residual), -1) << "the fold wrote residual";
}

// The norm folded into the bulk streaming kernel against add_rmsnorm then the same kernel
// (check_norm_fold): m = 1 and 2; the model shapes' k (1024-16384) and n (QKV / O widths), n not a
// multiple of the 8-row block, k not a multiple of the 1024-wide stage nor of 8 x 256 (2056: one
// thread owns two vectors, the others one), a one-CTA grid (n = 9); with and without delta and
// residual_out, fp32 and bf16 y, with and without PDL.
TEST(MatmulTest, StreamNormFoldMatchesNormThenMatmul) {
  MEGAOPS_REQUIRE_GPU();
  if (!matmul_stream_bulk_supported()) GTEST_SKIP() << "the fold needs the bulk version (sm_90)";
  std::mt19937_64 rng(test_seed() + 12);
  MatmulContext ctx;
  ctx.set_stream_bulk(true);
  const int kn[][2] = {{1024, 4096}, {2048, 3072}, {4096, 6144}, {2048, 1001},
                       {2056, 700},  {3080, 9},    {8192, 2048}, {16384, 520}};
  int cases = 0;
  for (int m = 1; m <= MATMUL_STREAM_M_MAX; ++m) {
    for (const auto& [k, n] : kn) {
      if (!matmul_stream_fits(m, k)) continue;  // m = 2, k = 16384: x does not fit
      check_norm_fold(ctx, m, n, k, true, true, DType::F32, false, rng);
      check_norm_fold(ctx, m, n, k, false, true, DType::F32, true, rng);
      check_norm_fold(ctx, m, n, k, true, false, DType::BF16, true, rng);
      cases += 3;
    }
  }
  EXPECT_EQ(cases, 45);  // 3 cases x (8 shapes at m = 1 + 7 at m = 2)
  // Many small problems. An arithmetic flaw that moves the fp32 sum of squares by an ulp changes x
  // only where the bf16 rounding of r * inv_rms * w flips (about 1e-5 of the elements), so the bit
  // checks need millions of elements to see one: 2.5 M here, cheap at n = 64 (fp32 y shows any
  // flip of x). A fold that summed each vector's two halves in the other order failed 1-4 of the
  // test's problems in each of 4 seeds (with residuals lacking the huge channels, in 2 of 3 seeds).
  for (int trial = 0; trial < 200; ++trial)
    check_norm_fold(ctx, 1 + trial % 2, 64, 8192, true, true, DType::F32, false, rng);
}

// A folded matmul (`good`, valid): cudaErrorNotSupported off the bulk streaming kernel (small-m,
// cuBLASLt, the cp.async ring, their footprints, run()), and where the GPU has the bulk kernel,
// run there by run() and run_stream().
void expect_fold_runs_only_on_bulk(MatmulContext& ctx, const MatmulParams& good) {
  ctx.set_stream_bulk(false);
  EXPECT_EQ(ctx.run_small_m(good), cudaErrorNotSupported);
  EXPECT_EQ(ctx.run_cublaslt(good), cudaErrorNotSupported);
  EXPECT_EQ(ctx.run_stream(good), cudaErrorNotSupported);
  EXPECT_EQ(ctx.run(good), cudaErrorNotSupported);
  KernelFootprint fp;
  EXPECT_EQ(MatmulContext::small_m_footprint(good, &fp), cudaErrorNotSupported);
  EXPECT_EQ(ctx.stream_footprint(good, &fp), cudaErrorNotSupported);
  if (!matmul_stream_bulk_supported()) return;
  ctx.set_stream_bulk(true);
  EXPECT_EQ(ctx.path(good), MatmulPath::Stream);
  EXPECT_EQ(ctx.stream_footprint(good, &fp), cudaSuccess);
  EXPECT_EQ(ctx.run(good), cudaSuccess);
  EXPECT_EQ(ctx.run_stream(good), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// A named invalid variant of a matmul's params.
struct BadParams {
  const char* what;
  MatmulParams p;
};

// Every variant in `bad` is cudaErrorInvalidValue on every path (small-m, cuBLASLt, run() and the
// streaming kernel's launch and footprint, in each version), and nothing was launched.
void expect_invalid_on_every_path(MatmulContext& ctx, const std::vector<BadParams>& bad) {
  KernelFootprint fp;
  for (const BadParams& b : bad) {
    EXPECT_EQ(ctx.run_small_m(b.p), cudaErrorInvalidValue) << "small_m: " << b.what;
    EXPECT_EQ(ctx.run_cublaslt(b.p), cudaErrorInvalidValue) << "cublaslt: " << b.what;
    for (const bool v : stream_versions()) {
      ctx.set_stream_bulk(v);
      EXPECT_EQ(ctx.run(b.p), cudaErrorInvalidValue) << "run: " << b.what;
      EXPECT_EQ(ctx.run_stream(b.p), cudaErrorInvalidValue)
          << (v ? "stream-bulk: " : "stream: ") << b.what;
      EXPECT_EQ(ctx.stream_footprint(b.p, &fp), cudaErrorInvalidValue)
          << (v ? "stream-bulk footprint: " : "stream footprint: ") << b.what;
    }
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// A folded norm anywhere but the bulk streaming kernel is cudaErrorNotSupported (small-m,
// cuBLASLt, the cp.async ring, and run() where the rule picks one of them); bad fold buffers are
// cudaErrorInvalidValue on every path, ahead of that. Nothing is launched for either.
TEST(MatmulTest, NormFoldRejectedOffTheBulkKernel) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 13);
  MatmulContext ctx;
  const int m = 2, k = 64;
  const Problem pr(m, 64, k, k, 64, rng);
  Output out(DType::F32, pr.m, pr.ldy);
  DeviceBuffer<float> res(size_t(m) * k), res_out(size_t(m) * k), delta(size_t(m) * k);
  DeviceBuffer<uint16_t> gain(k);
  res.upload(random_floats(res.n, -1.f, 1.f, rng));
  delta.upload(random_floats(delta.n, -1.f, 1.f, rng));
  gain.upload(to_bf16_bits(random_floats(k, 0.5f, 1.5f, rng)));
  MatmulParams good = pr.params(out.buf.ptr, DType::F32, false);
  good.x = nullptr;
  good.ldx = 0;
  good.fold.residual = res.ptr;
  good.fold.delta = delta.ptr;
  good.fold.weight = reinterpret_cast<const bf16*>(gain.ptr);
  good.fold.residual_out = res_out.ptr;

  expect_fold_runs_only_on_bulk(ctx, good);
  const bool bulk = matmul_stream_bulk_supported();
  std::vector<BadParams> bad;
  auto add = [&](const char* what, auto mutate) {
    MatmulParams p = good;
    mutate(p);
    bad.push_back({what, p});
  };
  add("residual_out == residual",
      [](MatmulParams& p) { p.fold.residual_out = const_cast<float*>(p.fold.residual); });
  add("residual_out overlaps residual",
      [](MatmulParams& p) { p.fold.residual_out = const_cast<float*>(p.fold.residual) + 4; });
  add("residual_out == delta",
      [](MatmulParams& p) { p.fold.residual_out = const_cast<float*>(p.fold.delta); });
  add("residual null", [](MatmulParams& p) { p.fold.residual = nullptr; });
  add("residual misaligned", [](MatmulParams& p) { p.fold.residual += 1; });
  add("delta misaligned", [](MatmulParams& p) { p.fold.delta += 2; });
  add("weight misaligned", [](MatmulParams& p) { p.fold.weight += 1; });
  add("residual_out misaligned", [](MatmulParams& p) { p.fold.residual_out += 3; });
  add("k % 8 != 0", [](MatmulParams& p) { p.k = 60; });
  add("eps < 0", [](MatmulParams& p) { p.fold.eps = -1e-5f; });
  add("eps NaN", [](MatmulParams& p) { p.fold.eps = std::nanf(""); });
  for (const BadParams& b : bad) {
    EXPECT_EQ(ctx.run_small_m(b.p), cudaErrorInvalidValue) << "small_m: " << b.what;
    EXPECT_EQ(ctx.run_cublaslt(b.p), cudaErrorInvalidValue) << "cublaslt: " << b.what;
    EXPECT_EQ(ctx.run(b.p), cudaErrorInvalidValue) << "run: " << b.what;
    for (const bool v : stream_versions()) {
      ctx.set_stream_bulk(v);
      EXPECT_EQ(ctx.run_stream(b.p), cudaErrorInvalidValue)
          << (v ? "stream-bulk: " : "stream: ") << b.what;
    }
  }
  // A separate residual_out just past residual is fine (on the bulk kernel; elsewhere refused).
  MatmulParams adjacent = good;
  adjacent.m = 1;
  adjacent.fold.residual_out = res.ptr + k;
  ctx.set_stream_bulk(bulk);
  EXPECT_EQ(ctx.run_stream(adjacent), bulk ? cudaSuccess : cudaErrorNotSupported);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// silu_mul on m rows of fp32 gate|up (gate then up, inter each) into bf16 out [m, inter].
cudaError_t launch_silu_mul_f32(const float* gate_up, void* out, int m, int inter) {
  SiluMulParams sp;
  sp.gate_up_f32 = gate_up;
  sp.out = reinterpret_cast<bf16*>(out);
  sp.m = m;
  sp.inter = inter;
  return launch_silu_mul(sp);
}

// One folded-SwiGLU case (kernels/act_fold.cuh) on the bulk streaming kernel: (a) silu_mul on the
// fp32 gate|up rows, then the matmul on its bf16 output; (b) the same matmul with the activation
// folded in, reading gate|up itself. The fold promises silu_mul's arithmetic, so y must equal (a)'s
// bit for bit; y is also held to the fp32 CPU oracle (ref::silu_mul, bf16 rounding of its output,
// matmul) within the stream tests' tolerance. gate holds uniform values in [-8, 8] and, one
// element in 32, values of magnitude 20-40 and 80-100, where 1 + e^-g rounds to 1 or e^-g
// overflows to inf (silu's tails: g and -0).
void check_silu_fold(MatmulContext& ctx, int m, int n, int k, DType y_dtype, bool pdl,
                     std::mt19937_64& rng) {
  SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
               " y=" + dtype_name(y_dtype) + " pdl=" + std::to_string(pdl));
  const size_t mk = size_t(m) * k;
  std::vector<float> gate_up = random_floats(2 * mk, -2.f, 2.f, rng);  // up: [-2, 2]
  std::uniform_real_distribution<float> body(-8.f, 8.f), tail(20.f, 40.f), far(80.f, 100.f);
  std::uniform_int_distribution<int> pick(0, 127);
  for (int b = 0; b < m; ++b)
    for (int i = 0; i < k; ++i) {
      float& g = gate_up[size_t(b) * 2 * k + i];
      const int r = pick(rng);
      g = r == 0   ? tail(rng)
          : r == 1 ? -tail(rng)
          : r == 2 ? far(rng)
          : r == 3 ? -far(rng)
                   : body(rng);
    }
  std::vector<float> w = random_floats(size_t(n) * k, -1.f, 1.f, rng);
  round_to_bf16(w.data(), w.size());

  DeviceBuffer<float> gate_up_dev(2 * mk);
  DeviceBuffer<uint16_t> w_dev(size_t(n) * k), act_dev(mk);
  gate_up_dev.upload(gate_up);
  w_dev.upload(to_bf16_bits(w));
  act_dev.poison();
  Output y_act(y_dtype, m, n), y_fold(y_dtype, m, n);

  ASSERT_EQ(launch_silu_mul_f32(gate_up_dev.ptr, act_dev.ptr, m, k), cudaSuccess);
  std::vector<float> act(mk);
  for (int b = 0; b < m; ++b) {
    const float* row = gate_up.data() + size_t(b) * 2 * k;
    ref::silu_mul(row, row + k, act.data() + size_t(b) * k, size_t(k));
  }
  MatmulParams p =
      matmul_params(reinterpret_cast<const bf16*>(act_dev.ptr),
                    reinterpret_cast<const bf16*>(w_dev.ptr), nullptr, y_dtype, m, n, k);
  p.launch.pdl = pdl;
  expect_fold_matches_unfolded(
      ctx, p, [&](MatmulParams& q) { q.silu_fold.gate_up = gate_up_dev.ptr; }, y_act, y_fold, act,
      w);
  EXPECT_EQ(first_bit_difference(gate_up_dev.download(), gate_up), -1) << "the fold wrote gate_up";
}

// The SwiGLU folded into the bulk streaming kernel against silu_mul then the same kernel
// (check_silu_fold): m = 1 and 2; the models' intermediate sizes as k (3072: qwen3-0.6b, 8192:
// llama3.2-1b, 14336: llama3.1-8b, which fits at m = 1 only) with down-projection widths, n not a
// multiple of the 8-row block, k not a multiple of the 1024-wide stage, a one-CTA grid (n = 9);
// fp32 y without PDL and bf16 y with it.
TEST(MatmulTest, StreamSiluFoldMatchesSiluMulThenMatmul) {
  MEGAOPS_REQUIRE_GPU();
  if (!matmul_stream_bulk_supported()) GTEST_SKIP() << "the fold needs the bulk version (sm_90)";
  std::mt19937_64 rng(test_seed() + 14);
  MatmulContext ctx;
  ctx.set_stream_bulk(true);
  const int kn[][2] = {{3072, 1024}, {8192, 2048}, {14336, 264},
                       {2056, 700},  {3080, 9},    {1024, 1001}};
  int cases = 0;
  for (int m = 1; m <= MATMUL_STREAM_M_MAX; ++m) {
    for (const auto& [k, n] : kn) {
      if (!matmul_stream_fits(m, k)) continue;  // m = 2, k = 14336: x does not fit
      check_silu_fold(ctx, m, n, k, DType::F32, false, rng);
      check_silu_fold(ctx, m, n, k, DType::BF16, true, rng);
      cases += 2;
    }
  }
  EXPECT_EQ(cases, 22);  // 2 cases x (6 shapes at m = 1 + 5 at m = 2)
  // Many small problems, fp32 y (which shows any flip of x): an fp32 difference of an ulp in
  // silu(g) * u changes x only where its bf16 rounding flips (~1e-5 of the elements), so the bit
  // check needs millions of elements to see one: 2.5 M here.
  for (int trial = 0; trial < 200; ++trial)
    check_silu_fold(ctx, 1 + trial % 2, 64, 8192, DType::F32, false, rng);
}

// A folded SwiGLU anywhere but the bulk streaming kernel is cudaErrorNotSupported (small-m,
// cuBLASLt, the cp.async ring, and run() where the rule picks one of them); a misaligned gate_up,
// both folds on at once, or a bad shape is cudaErrorInvalidValue on every path, ahead of that.
// Nothing is launched for either.
TEST(MatmulTest, SiluFoldRejectedOffTheBulkKernel) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 15);
  MatmulContext ctx;
  const int m = 2, k = 64;
  const Problem pr(m, 64, k, k, 64, rng);
  Output out(DType::F32, pr.m, pr.ldy);
  DeviceBuffer<float> gate_up(size_t(m) * 2 * k), res(size_t(m) * k);
  DeviceBuffer<uint16_t> gain(k);
  gate_up.upload(random_floats(gate_up.n, -4.f, 4.f, rng));
  res.upload(random_floats(res.n, -1.f, 1.f, rng));
  gain.upload(to_bf16_bits(random_floats(k, 0.5f, 1.5f, rng)));
  MatmulParams good = pr.params(out.buf.ptr, DType::F32, false);
  good.x = nullptr;
  good.ldx = 0;
  good.silu_fold.gate_up = gate_up.ptr;

  expect_fold_runs_only_on_bulk(ctx, good);
  const bool bulk = matmul_stream_bulk_supported();
  KernelFootprint fp;
  std::vector<BadParams> bad;
  auto add = [&](const char* what, auto mutate) {
    MatmulParams p = good;
    mutate(p);
    bad.push_back({what, p});
  };
  add("gate_up misaligned by 4", [](MatmulParams& p) { p.silu_fold.gate_up += 1; });
  add("gate_up misaligned by 8", [](MatmulParams& p) { p.silu_fold.gate_up += 2; });
  add("norm fold on too", [&](MatmulParams& p) {
    p.fold.residual = res.ptr;
    p.fold.weight = reinterpret_cast<const bf16*>(gain.ptr);
  });
  add("k % 8 != 0", [](MatmulParams& p) { p.k = 60; });
  expect_invalid_on_every_path(ctx, bad);
  // The streaming launcher itself (which MatmulContext validates for): both folds on is invalid,
  // the SwiGLU fold on the ring unsupported.
  StreamMatmulArgs a{nullptr, 0,      good.w, good.y, good.ldy, good.m,
                     good.n,  good.k, true,   {},     {},       good.silu_fold};
  EXPECT_EQ(launch_matmul_stream(a, 0, 0, LaunchOptions{}, &fp, false), cudaErrorNotSupported);
  a.fold.residual = res.ptr;
  a.fold.weight = reinterpret_cast<const bf16*>(gain.ptr);
  EXPECT_EQ(launch_matmul_stream(a, 0, 0, LaunchOptions{}, &fp, false), cudaErrorInvalidValue);
  if (bulk) {
    EXPECT_EQ(launch_matmul_stream(a, 0, 0, LaunchOptions{}, &fp, true), cudaErrorInvalidValue);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// The SwiGLU in the bulk streaming kernel's epilogue (MatmulParams::silu_out) against the same
// kernel into fp32 gate|up followed by silu_mul: bit for bit, and near the CPU oracle. x given or
// formed by a folded norm in the same launch (the chain's gate_up); act poisoned, with a row
// stride past inter whose gap must keep its poison; the kernel writes nothing to y.
void check_silu_epilogue(MatmulContext& ctx, int m, int inter, int k, bool norm_fold, bool pdl,
                         std::mt19937_64& rng, StreamSchedule schedule = StreamSchedule::Auto) {
  SCOPED_TRACE("m=" + std::to_string(m) + " inter=" + std::to_string(inter) +
               " k=" + std::to_string(k) + " norm fold=" + std::to_string(norm_fold) +
               " pdl=" + std::to_string(pdl));
  const int n = 2 * inter;
  const int64_t ld = inter + 8;
  std::vector<float> x = random_floats(size_t(m) * k, -1.f, 1.f, rng);
  round_to_bf16(x.data(), x.size());
  std::vector<float> w = random_floats(size_t(n) * k, -0.2f, 0.2f, rng);
  round_to_bf16(w.data(), w.size());
  std::vector<float> gain = random_floats(k, 0.5f, 1.5f, rng);
  round_to_bf16(gain.data(), gain.size());
  DeviceBuffer<uint16_t> x_dev(x.size()), w_dev(w.size()), gain_dev(k);
  DeviceBuffer<float> res_dev(x.size()), y_dev(size_t(m) * n);
  DeviceBuffer<uint16_t> act(size_t(m) * ld);
  x_dev.upload(to_bf16_bits(x));
  w_dev.upload(to_bf16_bits(w));
  gain_dev.upload(to_bf16_bits(gain));
  res_dev.upload(x);  // with the norm fold, x = norm(residual) * gain
  y_dev.poison();
  act.poison();

  MatmulParams p =
      matmul_params(reinterpret_cast<const bf16*>(x_dev.ptr),
                    reinterpret_cast<const bf16*>(w_dev.ptr), y_dev.ptr, DType::F32, m, n, k);
  p.launch.pdl = pdl;
  p.stream_schedule = schedule;
  if (norm_fold) {
    p.x = nullptr;
    p.ldx = 0;
    p.fold.residual = res_dev.ptr;
    p.fold.weight = reinterpret_cast<const bf16*>(gain_dev.ptr);
  }
  ASSERT_EQ(ctx.run_stream(p), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> y_before = y_dev.download();
  // silu_mul takes inter % 8 == 0: gate and up padded with zeros to that width, the pad dropped.
  const int inter8 = (inter + 7) / 8 * 8;
  std::vector<float> gate_up8(size_t(m) * 2 * inter8, 0.0f);
  for (int b = 0; b < m; ++b)
    for (int i = 0; i < inter; ++i) {
      gate_up8[size_t(b) * 2 * inter8 + i] = y_before[size_t(b) * n + i];
      gate_up8[size_t(b) * 2 * inter8 + inter8 + i] = y_before[size_t(b) * n + inter + i];
    }
  DeviceBuffer<float> gate_up8_dev(gate_up8.size());
  DeviceBuffer<uint16_t> act8(size_t(m) * inter8);
  gate_up8_dev.upload(gate_up8);
  act8.poison();
  ASSERT_EQ(launch_silu_mul_f32(gate_up8_dev.ptr, act8.ptr, m, inter8), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint16_t> act8_host = act8.download();
  std::vector<uint16_t> want(size_t(m) * inter);
  for (int b = 0; b < m; ++b)
    for (int i = 0; i < inter; ++i) want[size_t(b) * inter + i] = act8_host[size_t(b) * inter8 + i];

  MatmulParams q = p;  // y stays set: the epilogue must not write it
  q.silu_out.out = reinterpret_cast<bf16*>(act.ptr);
  q.silu_out.ld = ld;
  q.silu_out.inter = inter;
  EXPECT_EQ(ctx.path(q), MatmulPath::Stream);
  if (schedule == StreamSchedule::Dynamic) expect_dynamic_schedule(ctx, q, true);
  ASSERT_EQ(ctx.run_stream(q), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint16_t> got = act.download();
  EXPECT_EQ(first_bit_difference(y_dev.download(), y_before), -1) << "the epilogue wrote y";

  // The CPU oracle: x (or the normed residual, rounded to bf16 as the kernel rounds it) . w^T,
  // then silu(g) * u; a wrong pairing or row is off by O(1), rounding by far less.
  // With the fold, x is the norm's bf16 output as add_rmsnorm computes it (which the fold
  // matches bit for bit: StreamNormFoldMatchesNormThenMatmul), held within a bf16 ulp of the
  // CPU's norm; the oracle on the CPU's own rounding would see its rare flips (a flip moves g
  // and u by up to ~1e-2 where silu(g) * u may be ~0.1).
  std::vector<float> xin = x;
  if (norm_fold) {
    std::vector<float> xn(x.size());
    ref::rmsnorm(x.data(), gain.data(), xn.data(), m, k, p.fold.eps);
    DeviceBuffer<float> res_copy(x.size());
    DeviceBuffer<uint16_t> x_norm(x.size());
    res_copy.upload(x);
    x_norm.poison();
    AddRmsNormParams np;
    np.residual = res_copy.ptr;
    np.weight = p.fold.weight;
    np.out = reinterpret_cast<bf16*>(x_norm.ptr);
    np.rows = m;
    np.n = k;
    np.eps = p.fold.eps;
    ASSERT_EQ(launch_add_rmsnorm(np), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    xin = from_bf16_bits(x_norm.download());
    expect_within_one_bf16_ulp(xin, xn, "add_rmsnorm's x");
  }
  std::vector<float> y_cpu(size_t(m) * n), oracle(size_t(m) * inter);
  ref::matmul(xin.data(), w.data(), y_cpu.data(), m, k, n);
  for (int b = 0; b < m; ++b)
    ref::silu_mul(y_cpu.data() + size_t(b) * n, y_cpu.data() + size_t(b) * n + inter,
                  oracle.data() + size_t(b) * inter, size_t(inter));
  int64_t diff = -1;
  double worst = 0;
  for (int b = 0; b < m; ++b)
    for (int i = 0; i < ld; ++i) {
      const uint16_t g = got[size_t(b) * ld + i];
      if (i >= inter) {
        EXPECT_EQ(g, 0xffff) << "row " << b << " column " << i << " past inter was written";
        continue;
      }
      if (diff < 0 && g != want[size_t(b) * inter + i]) diff = int64_t(b) * inter + i;
      const float o = oracle[size_t(b) * inter + i];
      const float v = from_bf16_bits(std::vector<uint16_t>{g})[0];
      worst = std::max(worst, double(std::fabs(v - o)) / std::max(0.1, double(std::fabs(o))));
    }
  EXPECT_EQ(diff, -1) << "first element differing from matmul then silu_mul";
  EXPECT_LT(worst, 3e-2) << "against the CPU oracle";
}

// The presets' gate_up shapes (qwen3-0.6b inter 3072 x k 1024, llama3.2-1b 8192 x 2048) and
// awkward ones: one row block (inter 4), three (12), k not a multiple of the 1024-wide stage, a
// grid of more row blocks than CTAs (inter 12288 x k 1000); m = 1 and 2, the norm fold on and
// off, PDL on and off.
TEST(MatmulTest, StreamSiluEpilogueMatchesMatmulThenSiluMul) {
  MEGAOPS_REQUIRE_GPU();
  if (!matmul_stream_bulk_supported()) GTEST_SKIP() << "the epilogue needs the bulk version";
  std::mt19937_64 rng(test_seed() + 16);
  MatmulContext ctx;
  ctx.set_stream_bulk(true);
  const int shapes[][2] = {{3072, 1024}, {8192, 2048}, {4, 64}, {12, 1032}, {12288, 1000}};
  for (int m = 1; m <= MATMUL_STREAM_M_MAX; ++m)
    for (const auto& [inter, k] : shapes) {
      check_silu_epilogue(ctx, m, inter, k, false, m == 1, rng);
      check_silu_epilogue(ctx, m, inter, k, true, m == 2, rng);
    }
}

// The dynamic row-block schedule (StreamSchedule::Dynamic, m = 1) against the static one: the same
// bits, since a row's arithmetic does not depend on the CTA that computes it; with few CTAs (one
// takes every block from the ticket counter), injected delays that change which CTA takes which,
// rings of 2 and 4 slots, a k tail and a partial last row block.
TEST(MatmulTest, StreamDynamicScheduleMatchesStatic) {
  MEGAOPS_REQUIRE_GPU();
  if (!matmul_stream_bulk_supported()) GTEST_SKIP() << "the schedule is the bulk version's";
  std::mt19937_64 rng(test_seed() + 21);
  MatmulContext ctx;
  ctx.set_stream_bulk(true);
  int trials = 0;
  const int shapes[][2] = {{1000, 700}, {4096, 4096}, {14336, 203}};  // k, n
  for (int stages : {2, 4}) {
    ctx.set_stream_stages(stages);
    for (const auto& [k, n] : shapes) {
      const Problem pr(1, n, k, k, n, rng);
      for (int max_ctas : {1, 3, 37, 0}) {
        for (uint64_t seed = 0; seed <= 2; ++seed, ++trials) {
          SCOPED_TRACE("stages " + std::to_string(stages) + " n " + std::to_string(n) + " k " +
                       std::to_string(k) + " max_ctas " + std::to_string(max_ctas) + " seed " +
                       std::to_string(seed));
          Output fixed(DType::F32, 1, pr.ldy), dyn(DType::F32, 1, pr.ldy);
          MatmulParams p = pr.params(fixed.buf.ptr, DType::F32, seed == 1);
          p.max_ctas = max_ctas;
          if (seed > 0) p.sync.delay = DelayParams{4000, seed * 7919 + uint64_t(max_ctas)};
          p.stream_schedule = StreamSchedule::Static;
          expect_dynamic_schedule(ctx, p, false);
          ASSERT_EQ(ctx.run_stream(p), cudaSuccess);
          p.y = dyn.buf.ptr;
          p.stream_schedule = StreamSchedule::Dynamic;
          expect_dynamic_schedule(ctx, p, true);
          ASSERT_EQ(ctx.run_stream(p), cudaSuccess);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          EXPECT_EQ(first_bit_difference(dyn.buf.download(), fixed.buf.download()), -1)
              << "dynamic schedule differs from static (first differing byte)";
          expect_matches(pr, dyn, "stream-bulk, dynamic schedule");
        }
      }
    }
  }
  EXPECT_EQ(trials, 72);
  // Auto: dynamic from six row blocks a CTA (64 blocks: 8 CTAs take it, 16 do not); never at m = 2.
  const Problem pr(1, 512, 1024, 1024, 512, rng);
  Output out(DType::F32, 1, pr.ldy);
  MatmulParams p = pr.params(out.buf.ptr, DType::F32, false);
  for (const auto& [max_ctas, want] : std::vector<std::pair<int, bool>>{{8, true}, {16, false}}) {
    SCOPED_TRACE("max_ctas " + std::to_string(max_ctas));
    p.max_ctas = max_ctas;
    expect_dynamic_schedule(ctx, p, want);
  }
  const Problem pr2(2, 512, 1024, 1024, 512, rng);
  MatmulParams p2 = pr2.params(out.buf.ptr, DType::F32, false);
  p2.max_ctas = 8;
  p2.stream_schedule = StreamSchedule::Dynamic;
  expect_dynamic_schedule(ctx, p2, false);  // m = 2 has no dynamic instantiation
}

// The norm fold and the SwiGLU epilogue under the dynamic schedule: their own checks (bits against
// the unfolded launches, the oracle), forced dynamic. Short, for the sanitizers.
TEST(MatmulTest, StreamDynamicScheduleFolds) {
  MEGAOPS_REQUIRE_GPU();
  if (!matmul_stream_bulk_supported()) GTEST_SKIP() << "the schedule is the bulk version's";
  std::mt19937_64 rng(test_seed() + 22);
  MatmulContext ctx;
  ctx.set_stream_bulk(true);
  check_silu_epilogue(ctx, 1, 3072, 1024, true, true, rng, StreamSchedule::Dynamic);
  check_silu_epilogue(ctx, 1, 12, 1032, false, false, rng, StreamSchedule::Dynamic);
  check_norm_fold(ctx, 1, 700, 4096, true, true, DType::BF16, true, rng, StreamSchedule::Dynamic);
}

// 4100 dynamic launches through one context, each into a poisoned output: the launches past 4096
// reuse the first counter pairs, which hand out no block (the output keeps its poison) unless
// the launch before zeroed them.
TEST(MatmulTest, StreamDynamicScheduleReusesItsCounters) {
  MEGAOPS_REQUIRE_GPU();
  if (!matmul_stream_bulk_supported()) GTEST_SKIP() << "the schedule is the bulk version's";
  std::mt19937_64 rng(test_seed() + 23);
  MatmulContext fresh;  // its counter pairs start at the first
  fresh.set_stream_bulk(true);
  const Problem pr(1, 512, 1024, 1024, 512, rng);
  Output out(DType::F32, 1, pr.ldy);
  MatmulParams p = pr.params(out.buf.ptr, DType::F32, false);
  p.max_ctas = 8;  // 64 row blocks: 56 from tickets
  p.stream_schedule = StreamSchedule::Dynamic;
  expect_dynamic_schedule(fresh, p, true);
  for (int i = 0; i < 4100; ++i) {
    ASSERT_EQ(cudaMemset(out.buf.ptr, 0xff, out.elems * sizeof(float)), cudaSuccess);
    ASSERT_EQ(fresh.run_stream(p), cudaSuccess);
    if (i % 1024 == 0 || i >= 4096) {
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      SCOPED_TRACE("launch " + std::to_string(i));
      expect_matches(pr, out, "stream-bulk, dynamic schedule, counters reused");
    }
  }
}

// The SwiGLU epilogue anywhere but the bulk streaming kernel is cudaErrorNotSupported; gate and
// up rows that cannot pair four to a row block (inter % 4 != 0, n != 2 inter), a row stride below
// inter, a misaligned act or the SwiGLU fold on as well is cudaErrorInvalidValue on every path.
TEST(MatmulTest, SiluEpilogueRejectedOffTheBulkKernelOrUnpaired) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 17);
  MatmulContext ctx;
  const int m = 1, inter = 32, k = 64;
  const Problem pr(m, 2 * inter, k, k, 2 * inter, rng);
  DeviceBuffer<uint16_t> act(size_t(m) * inter + 8);
  DeviceBuffer<float> gate_up(size_t(m) * 2 * k);
  MatmulParams good = pr.params(nullptr, DType::F32, false);
  good.silu_out.out = reinterpret_cast<bf16*>(act.ptr);
  good.silu_out.ld = inter;
  good.silu_out.inter = inter;
  expect_fold_runs_only_on_bulk(ctx, good);
  std::vector<BadParams> bad;
  auto add = [&](const char* what, auto mutate) {
    MatmulParams p = good;
    mutate(p);
    bad.push_back({what, p});
  };
  add("inter % 4 != 0", [](MatmulParams& p) {
    p.silu_out.inter = 30;
    p.n = 60;
  });
  add("n != 2 inter", [](MatmulParams& p) { p.n = 56; });
  add("ld < inter", [](MatmulParams& p) { p.silu_out.ld = 31; });
  add("act misaligned", [](MatmulParams& p) {
    p.silu_out.out = reinterpret_cast<bf16*>(reinterpret_cast<uint8_t*>(p.silu_out.out) + 1);
  });
  add("SiLU fold on too", [&](MatmulParams& p) { p.silu_fold.gate_up = gate_up.ptr; });
  expect_invalid_on_every_path(ctx, bad);
}

// The greedy argmax epilogue (MatmulParams::argmax_out) of one launch against the same launch
// without it: y bit for bit, and argmax_out[b] the pack of ref::sample's greedy pick over the y it
// wrote. `plant`: columns 3 and 3 + 8 q (one row-block position, so bit-equal sums) get the
// weights 4 sign(x[0]), the maximum of batch row 0 by far: a tie the lower column must win.
// `poison`: column n / 2 gets NaN weights, a NaN logit in every batch row, which must turn every
// row's pack into GREEDY_PACK_NONFINITE (no token), whichever CTA holds it.
void check_argmax_epilogue(MatmulContext& ctx, int m, int n, int k, bool plant, int max_ctas,
                           StreamSchedule schedule, uint64_t delay_seed, std::mt19937_64& rng,
                           bool poison = false) {
  SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k) +
               " plant " + std::to_string(plant) + " max_ctas " + std::to_string(max_ctas) +
               " delay seed " + std::to_string(delay_seed) + " poison " + std::to_string(poison));
  Problem pr(m, n, k, k, n, rng);
  const int tie = 3 + 8 * ((n - 4) / 8), nan_col = n / 2;
  if (plant || poison) {
    for (int j = 0; j < k; ++j) {
      const float v = pr.x[j] < 0.f ? -4.f : 4.f;
      if (plant) pr.w[size_t(3) * k + j] = pr.w[size_t(tie) * k + j] = v;
      if (poison) pr.w[size_t(nan_col) * k + j] = std::nanf("");
    }
    pr.w_dev.upload(to_bf16_bits(pr.w));
  }
  Output plain(DType::F32, m, n), fused(DType::F32, m, n);
  DeviceBuffer<unsigned long long> packs{size_t(m)};
  packs.upload(std::vector<unsigned long long>(size_t(m), 0ull));
  MatmulParams p = pr.params(plain.buf.ptr, DType::F32, delay_seed % 2 == 1);
  p.max_ctas = max_ctas;
  p.stream_schedule = schedule;
  if (delay_seed > 0) p.sync.delay = DelayParams{4000, delay_seed};
  ASSERT_EQ(ctx.run_stream(p), cudaSuccess);
  p.y = fused.buf.ptr;
  p.argmax_out = packs.ptr;
  EXPECT_EQ(ctx.path(p), MatmulPath::Stream);
  if (schedule == StreamSchedule::Dynamic) expect_dynamic_schedule(ctx, p, true);
  ASSERT_EQ(ctx.run_stream(p), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> y = download_floats(fused);
  EXPECT_EQ(first_bit_difference(y, download_floats(plain)), -1) << "the epilogue changed y";
  if (!plant && !poison) expect_matches(pr, fused, "stream-bulk, argmax epilogue");
  const std::vector<unsigned long long> got = packs.download();
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  for (int b = 0; b < m; ++b) {
    const int want = ref::sample(y.data() + size_t(b) * n, n, greedy, 0.5f);
    EXPECT_EQ(greedy_unpack_token(got[b]), want) << "batch row " << b;
    if (poison) {
      EXPECT_EQ(want, NONFINITE_LOGITS_TOKEN) << "batch row " << b;
      EXPECT_EQ(got[b], GREEDY_PACK_NONFINITE) << "batch row " << b;
    } else {
      ASSERT_GE(want, 0) << "batch row " << b;
      EXPECT_EQ(got[b], greedy_pack(y[size_t(b) * n + want], want)) << "batch row " << b;
    }
  }
  if (plant && !poison)
    EXPECT_EQ(greedy_unpack_token(got[0]), 3) << "the planted tie's lower column";
}

// LM-head-like launches: the 1B's vocabulary at a short k (two thousand row blocks, the dynamic
// schedule), a partial last row block, a k tail, a single row block, one CTA for all; m = 1 and 2,
// static and dynamic, injected delays; a NaN column among finite ones, and a row of NaN logits
// only (both: no token).
TEST(MatmulTest, StreamArgmaxEpilogueMatchesGreedyOverY) {
  MEGAOPS_REQUIRE_GPU();
  if (!matmul_stream_bulk_supported()) GTEST_SKIP() << "the epilogue needs the bulk version";
  std::mt19937_64 rng(test_seed() + 24);
  MatmulContext ctx;
  ctx.set_stream_bulk(true);
  for (int m = 1; m <= MATMUL_STREAM_M_MAX; ++m) {
    check_argmax_epilogue(ctx, m, 128256, 64, true, 0, StreamSchedule::Auto, 0, rng);
    check_argmax_epilogue(ctx, m, 128256, 64, false, 0, StreamSchedule::Auto, 0, rng, true);
    check_argmax_epilogue(ctx, m, 4099, 1000, true, 0, StreamSchedule::Static, 1, rng);
    check_argmax_epilogue(ctx, m, 4099, 1000, true, 0, StreamSchedule::Static, 5, rng, true);
    check_argmax_epilogue(ctx, m, 4099, 1000, false, 37, StreamSchedule::Static, 2, rng);
    check_argmax_epilogue(ctx, m, 13, 2048, true, 1, StreamSchedule::Static, 0, rng);
    check_argmax_epilogue(ctx, m, 7, 64, false, 0, StreamSchedule::Static, 0, rng);
  }
  check_argmax_epilogue(ctx, 1, 5000, 128, true, 3, StreamSchedule::Dynamic, 3, rng);
  check_argmax_epilogue(ctx, 1, 5000, 128, false, 3, StreamSchedule::Dynamic, 4, rng, true);
  check_argmax_epilogue(ctx, 1, 5000, 128, false, 1, StreamSchedule::Dynamic, 0, rng);
  // Every logit NaN: the row is broken, not empty.
  Problem pr(1, 21, 64, 64, 21, rng);
  std::fill(pr.w.begin(), pr.w.end(), std::nanf(""));
  pr.w_dev.upload(to_bf16_bits(pr.w));
  Output out(DType::F32, 1, 21);
  DeviceBuffer<unsigned long long> packs(1);
  packs.upload({0ull});
  MatmulParams p = pr.params(out.buf.ptr, DType::F32, false);
  p.argmax_out = packs.ptr;
  ASSERT_EQ(ctx.run_stream(p), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(packs.download()[0], GREEDY_PACK_NONFINITE);
}

// The argmax epilogue anywhere but the bulk streaming kernel is cudaErrorNotSupported; a bf16 y,
// the SwiGLU epilogue as well or a misaligned buffer is cudaErrorInvalidValue on every path.
TEST(MatmulTest, ArgmaxEpilogueRejectedOffTheBulkKernelOrMisused) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 25);
  MatmulContext ctx;
  const Problem pr(1, 64, 64, 64, 64, rng);
  Output out(DType::F32, 1, 64);
  DeviceBuffer<unsigned long long> packs(2);
  DeviceBuffer<uint16_t> act(64);
  packs.upload({0ull, 0ull});
  MatmulParams good = pr.params(out.buf.ptr, DType::F32, false);
  good.argmax_out = packs.ptr;
  expect_fold_runs_only_on_bulk(ctx, good);
  std::vector<BadParams> bad;
  auto add = [&](const char* what, auto mutate) {
    MatmulParams p = good;
    mutate(p);
    bad.push_back({what, p});
  };
  add("y bf16", [](MatmulParams& p) { p.y_dtype = DType::BF16; });
  add("SwiGLU epilogue too", [&](MatmulParams& p) {
    p.silu_out.out = reinterpret_cast<bf16*>(act.ptr);
    p.silu_out.ld = 32;
    p.silu_out.inter = 32;
  });
  add("packs misaligned", [](MatmulParams& p) {
    p.argmax_out =
        reinterpret_cast<unsigned long long*>(reinterpret_cast<uint8_t*>(p.argmax_out) + 4);
  });
  expect_invalid_on_every_path(ctx, bad);
}

TEST(MatmulTest, CublasLtMatchesReferenceOnAwkwardShapes) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 1);
  MatmulContext ctx;
  for (int m : SWEEP_M) {
    for (const auto& kn : SWEEP_KN) {
      const Problem pr(m, kn[1], kn[0], kn[0], kn[1], rng);
      for (DType t : {DType::BF16, DType::F32}) check_path(ctx, pr, Path::CublasLt, t, false);
    }
  }
}

// run() picks a path by m; around the threshold and at both ends it must still be right.
TEST(MatmulTest, DispatchMatchesReference) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 2);
  MatmulContext ctx;
  for (int m : {1, 8, 9, 16, 17, 32, 64, 65, 200}) {
    const Problem pr(m, 333, 1032, 1032, 333, rng);
    check_path(ctx, pr, Path::Dispatch, DType::BF16, true);
    check_path(ctx, pr, Path::Dispatch, DType::F32, false);
  }
}

// ldx > k (padding holds NaN) and ldy > n (padding must stay poisoned), on both paths.
TEST(MatmulTest, StridedOperands) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 3);
  MatmulContext ctx;
  for (int m : {1, 7, 16, 64}) {
    for (const auto& kn : SWEEP_KN) {
      const int k = kn[0], n = kn[1];
      const Problem pr(m, n, k, k + 24, n + 13, rng);
      for (DType t : {DType::BF16, DType::F32}) {
        if (m <= MATMUL_SMALL_M_MAX) check_path(ctx, pr, Path::SmallM, t, true);
        for (const bool bulk : stream_versions()) {
          ctx.set_stream_bulk(bulk);
          if (matmul_stream_fits(m, k)) check_path(ctx, pr, Path::Stream, t, true);
        }
        ctx.set_stream_bulk(false);
        check_path(ctx, pr, Path::CublasLt, t, false);
      }
    }
  }
}

// Two PDL launches where the second reads the first's output: the second kernel starts early and
// loads its weights, but must read x only after the first has finished. y1 is poisoned before
// each round, so a read before the wait shows up as NaN in y2. The first matmul is large (32 MB of
// weights) so that the second is resident and waiting while it runs.
TEST(MatmulTest, PdlChainReadsPredecessorOutputOnlyAfterWait) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 4);
  MatmulContext ctx;
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  for (int m : {1, 5, 16}) {
    const int k1 = 4096, n1 = 4096, n2 = 1000;
    const Problem first(m, n1, k1, k1, n1, rng);
    const std::vector<float> w2 = [&] {
      std::vector<float> v = random_floats(size_t(n2) * n1, -1.f, 1.f, rng);
      round_to_bf16(v.data(), v.size());
      return v;
    }();
    DeviceBuffer<uint16_t> w2_dev(w2.size());
    w2_dev.upload(to_bf16_bits(w2));
    for (int round = 0; round < 5; ++round) {
      // Rounds 3 and 4 repeat 1 and 2 with the bulk version of the streaming kernel.
      const bool bulk = round >= 3;
      if (bulk && !matmul_stream_bulk_supported()) break;
      ctx.set_stream_bulk(bulk);
      DeviceBuffer<uint16_t> y1(size_t(m) * n1);
      DeviceBuffer<float> y2(size_t(m) * n2);
      y1.poison();
      y2.poison();
      // The poison memsets ran on the legacy stream, which does not order with a non-blocking one.
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      MatmulParams p1 = first.params(y1.ptr, DType::BF16, true, stream);
      MatmulParams p2;
      p2.x = reinterpret_cast<const bf16*>(y1.ptr);
      p2.ldx = n1;
      p2.w = reinterpret_cast<const bf16*>(w2_dev.ptr);
      p2.y = y2.ptr;
      p2.ldy = n2;
      p2.y_dtype = DType::F32;
      p2.m = m;
      p2.n = n2;
      p2.k = n1;
      p2.launch.stream = stream;
      p2.launch.pdl = true;
      // m = 1: both on the streaming kernel in rounds 1 and 3 (whose CTAs fill their whole ring
      // before the wait), mixed in rounds 2 and 4.
      const bool stream1 = m == 1 && (round == 1 || round == 3), stream2 = m == 1 && round >= 1;
      ASSERT_EQ(stream1 ? ctx.run_stream(p1) : ctx.run_small_m(p1), cudaSuccess);
      ASSERT_EQ(stream2 ? ctx.run_stream(p2) : ctx.run_small_m(p2), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);

      const std::vector<float> y1_host = from_bf16_bits(y1.download());
      EXPECT_LE(rel_error(y1_host.data(), first.ref.data(), y1_host.size()), BF16_OUT_TOL);
      std::vector<float> ref2(size_t(m) * n2);
      ref::matmul(y1_host.data(), w2.data(), ref2.data(), m, n1, n2);
      const std::vector<float> y2_host = y2.download();
      EXPECT_LE(rel_error(y2_host.data(), ref2.data(), ref2.size()), F32_OUT_TOL)
          << "m=" << m << " round " << round;
    }
  }
  cudaStreamDestroy(stream);
}

// Both paths captured into one CUDA graph (with PDL on the small-m launch) and replayed with new x
// each time: nothing may allocate or synchronise during capture, and replays must read live memory.
TEST(MatmulTest, GraphCaptureAndReplay) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 5);
  MatmulContext ctx;
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  Problem small(3, 500, 4096, 4096, 500, rng);
  Problem large(33, 3072, 2048, 2048, 3072, rng);
  Problem streamed(2, 700, 2056, 2056, 700, rng);
  Output small_out(DType::BF16, small.m, small.ldy);
  Output large_out(DType::F32, large.m, large.ldy);
  Output stream_out(DType::F32, streamed.m, streamed.ldy);
  const MatmulParams ps = small.params(small_out.buf.ptr, DType::BF16, true, stream);
  const MatmulParams pl = large.params(large_out.buf.ptr, DType::F32, false, stream);
  const MatmulParams pst = streamed.params(stream_out.buf.ptr, DType::F32, true, stream);

  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // Eager warm-up, as an executor does before capturing (loads modules, primes cuBLASLt).
  ASSERT_EQ(ctx.run_small_m(ps), cudaSuccess);
  ASSERT_EQ(ctx.run_cublaslt(pl), cudaSuccess);
  ASSERT_EQ(ctx.run_stream(pst), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);

  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const cudaError_t small_status = ctx.run_small_m(ps);
  const cudaError_t large_status = ctx.run_cublaslt(pl);
  const cudaError_t stream_status = ctx.run_stream(pst);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(small_status, cudaSuccess);
  ASSERT_EQ(large_status, cudaSuccess);
  ASSERT_EQ(stream_status, cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  replay_and_check(exec, stream, rng,
                   {{&small, &small_out, "graph small_m"},
                    {&large, &large_out, "graph cublaslt"},
                    {&streamed, &stream_out, "graph stream"}},
                   3);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// cuBLASLt tuning for decode-sized problems (MatmulContext::tune_pending): a capture queues each
// problem without a tuned algorithm once, tuning leaves the real outputs alone (scratch output),
// the next capture finds every problem tuned, and the tuned graph matches the reference on fresh
// inputs with poisoned outputs. Problems larger than MATMUL_TUNE_MAX_M, and a context with tuning
// off, queue nothing. The shapes are this test's own, so no other test of the process tuned them.
TEST(MatmulTest, TunedCublasLtMatchesReference) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 11);
  MatmulContext ctx;
  ctx.set_tuning(true);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  Problem a(1, 1496, 2056, 2056, 1496, rng);
  Problem b(5, 777, 1032, 1040, 800, rng);
  Problem c(MATMUL_TUNE_MAX_M, 2000, 512, 512, 2000, rng);
  Problem big(MATMUL_TUNE_MAX_M + 1, 1000, 264, 264, 1000, rng);
  Output a_out(DType::F32, a.m, a.ldy), b_out(DType::BF16, b.m, b.ldy),
      c_out(DType::F32, c.m, c.ldy), big_out(DType::F32, big.m, big.ldy);
  const MatmulParams params[] = {a.params(a_out.buf.ptr, DType::F32, false, stream),
                                 b.params(b_out.buf.ptr, DType::BF16, false, stream),
                                 c.params(c_out.buf.ptr, DType::F32, false, stream),
                                 big.params(big_out.buf.ptr, DType::F32, false, stream)};
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto capture = [&](MatmulContext& mc, cudaGraph_t* graph) {
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    cudaError_t status = cudaSuccess;
    for (const MatmulParams& p : params)
      if (status == cudaSuccess) status = mc.run_cublaslt(p);
    // The same problems again: queued once each.
    for (const MatmulParams& p : params)
      if (status == cudaSuccess) status = mc.run_cublaslt(p);
    ASSERT_EQ(cudaStreamEndCapture(stream, graph), cudaSuccess);
    ASSERT_EQ(status, cudaSuccess);
  };
  // What a fresh context queues from one capture.
  auto queued_by_new_context = [&](bool tuning) {
    MatmulContext mc;
    mc.set_tuning(tuning);
    cudaGraph_t g = nullptr;
    capture(mc, &g);
    if (g) cudaGraphDestroy(g);
    return mc.pending_tuning();
  };
  EXPECT_EQ(queued_by_new_context(false), 0u);
  cudaGraph_t first = nullptr;
  capture(ctx, &first);
  cudaGraphDestroy(first);
  EXPECT_EQ(ctx.pending_tuning(), 3u);  // a, b, c; not big (m > MATMUL_TUNE_MAX_M)
  ctx.tune_pending(stream);
  EXPECT_EQ(ctx.pending_tuning(), 0u);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  // Nothing ran into the real outputs: they still hold their poison.
  for (const Output* o : {&a_out, &b_out, &c_out}) {
    const std::vector<uint8_t> raw = o->buf.download();
    EXPECT_TRUE(std::all_of(raw.begin(), raw.end(), [](uint8_t v) { return v == 0xff; }));
  }
  cudaGraph_t graph = nullptr;
  capture(ctx, &graph);
  EXPECT_EQ(ctx.pending_tuning(), 0u);         // every problem found tuned
  EXPECT_EQ(queued_by_new_context(true), 0u);  // tuned algorithms are process-wide
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  replay_and_check(exec, stream, rng,
                   {{&a, &a_out, "tuned cublaslt"},
                    {&b, &b_out, "tuned cublaslt"},
                    {&c, &c_out, "tuned cublaslt"},
                    {&big, &big_out, "untuned cublaslt"}},
                   2);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(MatmulTest, InvalidParamsReturnInvalidValue) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 6);
  MatmulContext ctx;
  const Problem pr(4, 64, 64, 64, 64, rng);
  Output out(DType::F32, pr.m, pr.ldy);
  const MatmulParams good = pr.params(out.buf.ptr, DType::F32, false);
  ASSERT_EQ(ctx.run_small_m(good), cudaSuccess);
  ASSERT_EQ(ctx.run_cublaslt(good), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  std::vector<BadParams> bad;
  auto add = [&](const char* what, auto mutate) {
    MatmulParams p = good;
    mutate(p);
    bad.push_back({what, p});
  };
  add("x null", [](MatmulParams& p) { p.x = nullptr; });
  add("w null", [](MatmulParams& p) { p.w = nullptr; });
  add("y null", [](MatmulParams& p) { p.y = nullptr; });
  add("m = 0", [](MatmulParams& p) { p.m = 0; });
  add("m < 0", [](MatmulParams& p) { p.m = -3; });
  add("n = 0", [](MatmulParams& p) { p.n = 0; });
  add("k = 0", [](MatmulParams& p) { p.k = 0; });
  add("k % 8 != 0", [](MatmulParams& p) { p.k = 60; });
  add("ldx < k", [](MatmulParams& p) { p.ldx = 56; });
  add("ldx % 8 != 0", [](MatmulParams& p) { p.ldx = 68; });
  add("ldy < n", [](MatmulParams& p) { p.ldy = 63; });
  add("y dtype F16", [](MatmulParams& p) { p.y_dtype = DType::F16; });
  add("x misaligned", [](MatmulParams& p) { p.x += 1; });
  add("w misaligned", [](MatmulParams& p) { p.w += 4; });
  add("y misaligned for f32", [](MatmulParams& p) { p.y = static_cast<char*>(p.y) + 2; });
  for (const BadParams& b : bad) {
    EXPECT_EQ(ctx.run_small_m(b.p), cudaErrorInvalidValue) << "small_m: " << b.what;
    EXPECT_EQ(ctx.run_stream(b.p), cudaErrorInvalidValue) << "stream: " << b.what;
    EXPECT_EQ(ctx.run_cublaslt(b.p), cudaErrorInvalidValue) << "cublaslt: " << b.what;
    EXPECT_EQ(ctx.run(b.p), cudaErrorInvalidValue) << "run: " << b.what;
  }
  // Beyond the small-m kernel's range, but valid for cuBLASLt (and so for run()).
  MatmulParams too_many_rows = good;
  too_many_rows.m = MATMUL_SMALL_M_MAX + 1;
  EXPECT_EQ(ctx.run_small_m(too_many_rows), cudaErrorInvalidValue);
  // Beyond the streaming kernel's: m > MATMUL_STREAM_M_MAX, or x too large for its shared memory.
  MatmulParams stream_m = good;
  stream_m.m = MATMUL_STREAM_M_MAX + 1;
  EXPECT_EQ(ctx.run_stream(stream_m), cudaErrorInvalidValue);
  EXPECT_FALSE(matmul_stream_fits(1, 16385));
  EXPECT_FALSE(matmul_stream_fits(4, 14336));
  EXPECT_FALSE(matmul_stream_fits(3, 1024));
  EXPECT_FALSE(matmul_stream_fits(2, 8200));
  EXPECT_TRUE(matmul_stream_fits(1, 16384));
  EXPECT_TRUE(matmul_stream_fits(2, 8192));
  EXPECT_THROW(ctx.set_stream_stages(1), InputError);
  EXPECT_THROW(ctx.set_stream_stages(MATMUL_STREAM_STAGES_MAX + 1), InputError);
  ctx.set_stream_stages(MATMUL_STREAM_STAGES_MIN);
  EXPECT_EQ(ctx.stream_stages(), MATMUL_STREAM_STAGES_MIN);
  // Nothing was launched for the rejected calls, so no error may be pending.
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// The developer knobs (kernels/matmul_settings.h): a bad spelling is one InputError naming the
// option; `stream-for-small` and `stream` route as documented (kernels/matmul.cuh), the default
// follows matmul_dispatch_path.
TEST(MatmulTest, SettingsKnobs) {
  MEGAOPS_REQUIRE_GPU();
  // Each setting as the CLI spells it, parsed into fresh settings.
  auto settings = [](const std::string& key, const std::string& value) {
    MatmulSettings st;
    if (key == "path") parse_matmul_path(value, &st, "--matmul-path");
    if (key == "stages") st.stream_stages = parse_stream_stages(value, "--stream-stages");
    if (key == "shapes")
      st.stream_shapes = parse_matmul_stream_shapes(value, "--matmul-stream-shapes");
    if (key == "kernel") st.stream_bulk = parse_stream_kernel(value, "--stream-kernel");
    return st;
  };
  auto expect_error = [&](const std::string& key, const std::string& value) {
    try {
      MatmulContext ctx(settings(key, value));
      ADD_FAILURE() << key << " " << value << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("--"), std::string::npos) << e.what();
    }
  };
  expect_error("path", "bogus");
  expect_error("stages", "1");
  expect_error("stages", "4x");
  expect_error("shapes", "4096x");
  expect_error("shapes", "4096x4096,12");
  expect_error("shapes", "4096x4096x1");
  {
    MatmulSettings st;
    st.tune = true;
    EXPECT_TRUE(MatmulContext(st).tuning());
  }
  EXPECT_FALSE(MatmulContext().tuning());
  auto path_of = [](int m, int n, int k, bool pdl = false, const MatmulSettings& st = {}) {
    MatmulContext ctx(st);
    MatmulParams p;
    p.m = m;
    p.n = n;
    p.k = k;
    p.launch.pdl = pdl;
    return ctx.path(p);
  };
  // On sm_90 the bulk version of the streaming kernel is the default, and the rule sends the
  // 1B-class QKV / O / down at m = 1 to it (matmul_dispatch_path); elsewhere small-m / cuBLASLt.
  const bool bulk = matmul_stream_bulk_supported();
  EXPECT_EQ(MatmulContext().stream_bulk(), bulk);
  const MatmulPath small_model = bulk ? MatmulPath::Stream : MatmulPath::SmallM;
  EXPECT_EQ(path_of(1, 3072, 2048), small_model);
  EXPECT_EQ(path_of(1, 3072, 2048, true), small_model);
  EXPECT_EQ(path_of(1, 2048, 8192), bulk ? MatmulPath::Stream : MatmulPath::CublasLt);
  EXPECT_EQ(path_of(2, 3072, 2048), MatmulPath::SmallM);
  EXPECT_EQ(path_of(1, 6144, 4096), MatmulPath::CublasLt);
  EXPECT_EQ(path_of(16, 3072, 2048), MatmulPath::CublasLt);
  // Under PDL the 8B-class QKV / O at m = 1 go to the streaming kernel (matmul_dispatch_path).
  EXPECT_EQ(path_of(1, 6144, 4096, true), MatmulPath::Stream);
  EXPECT_EQ(path_of(1, 4096, 4096, true), MatmulPath::Stream);
  expect_error("kernel", "tma");
  {
    // The ring version: the rule of GPUs without bulk copies.
    const MatmulSettings ring = settings("kernel", "ring");
    EXPECT_FALSE(MatmulContext(ring).stream_bulk());
    EXPECT_EQ(path_of(1, 3072, 2048, false, ring), MatmulPath::SmallM);
    EXPECT_EQ(path_of(1, 2048, 8192, false, ring), MatmulPath::CublasLt);
    EXPECT_EQ(path_of(1, 6144, 4096, true, ring), MatmulPath::Stream);
  }
  if (bulk) {
    EXPECT_TRUE(MatmulContext(settings("kernel", "bulk")).stream_bulk());
  } else {
    expect_error("kernel", "bulk");  // no bulk copies on this GPU
  }
  // The 8B's down and the LM heads: on the bulk kernel with either PDL setting, else cuBLASLt
  // (matmul_dispatch_path).
  EXPECT_EQ(path_of(1, 4096, 14336, true), bulk ? MatmulPath::Stream : MatmulPath::CublasLt);
  EXPECT_EQ(path_of(1, 4096, 14336), bulk ? MatmulPath::Stream : MatmulPath::CublasLt);
  EXPECT_EQ(path_of(1, 128256, 2048), bulk ? MatmulPath::Stream : MatmulPath::CublasLt);
  EXPECT_EQ(path_of(2, 6144, 4096, true), MatmulPath::CublasLt);
  {
    const MatmulSettings st = settings("path", "cublaslt");
    EXPECT_EQ(path_of(1, 6144, 4096, true, st), MatmulPath::CublasLt);
  }
  {
    const MatmulSettings st = settings("path", "stream-for-small");
    EXPECT_EQ(path_of(1, 3072, 2048, false, st), MatmulPath::Stream);
    EXPECT_EQ(path_of(1, 6144, 4096, false, st), MatmulPath::CublasLt);
    // m > 2: the streaming kernel cannot
    EXPECT_EQ(path_of(4, 3072, 2048, false, st), MatmulPath::SmallM);
  }
  {
    const MatmulSettings st = settings("path", "stream");
    EXPECT_EQ(path_of(1, 128256, 4096, false, st), MatmulPath::Stream);
    EXPECT_EQ(path_of(1, 4096, 14336, false, st), MatmulPath::Stream);
    // x too large: the rule decides
    EXPECT_EQ(path_of(1, 4096, 20000, false, st), MatmulPath::CublasLt);
  }
  {
    const MatmulSettings st = settings("shapes", "6144x4096,4096x4096");
    EXPECT_EQ(path_of(1, 6144, 4096, false, st), MatmulPath::Stream);
    EXPECT_EQ(path_of(1, 4096, 4096, false, st), MatmulPath::Stream);
    // Not listed, or m > 2: the rule decides.
    EXPECT_EQ(path_of(1, 32769, 4096, false, st), MatmulPath::CublasLt);
    EXPECT_EQ(path_of(8, 4096, 4096, false, st), MatmulPath::CublasLt);
  }
}

TEST(HbmReadTest, MeasuresFinitePositiveBandwidth) {
  MEGAOPS_REQUIRE_GPU();
  const double gbps = measure_hbm_read_gbps(size_t{64} << 20, 5);
  EXPECT_TRUE(std::isfinite(gbps));
  EXPECT_GT(gbps, 0.0);
  // Odd sizes take the tail loop; tiny ones a one-block grid.
  EXPECT_GT(measure_hbm_read_gbps((size_t{1} << 20) + 48, 3), 0.0);
  EXPECT_GT(measure_hbm_read_gbps(16, 1), 0.0);
  EXPECT_THROW(measure_hbm_read_gbps(8, 1), InputError);
}

}  // namespace
}  // namespace megaops
