// Standalone prefill attention timing (see attention_prefill_bench.h).
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/counter_rng.h"
#include "core/cuda_check.h"
#include "core/cuda_owners.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/attention_cudnn.h"
#include "kernels/attention_prefill.cuh"
#include "kernels/attention_prefill_bench.h"
#include "kernels/cudnn_library.h"
#include "kernels/prefill_gemm_bench.h"

namespace megaops {

namespace {

// bf16 values in [lo, hi) from the counter RNG (never zeros).
__global__ void attention_bench_fill_kernel(uint16_t* p, size_t count, uint64_t seed, float lo,
                                            float hi) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x)
    p[i] =
        static_cast<uint16_t>(__float_as_uint(lo + (hi - lo) * counter_uniform(seed, i, 0)) >> 16);
}

void fill(CudaMemory& m, size_t count, uint64_t seed, float lo, float hi) {
  attention_bench_fill_kernel<<<1024, 256>>>(static_cast<uint16_t*>(m.ptr), count, seed, lo, hi);
  MEGAOPS_CUDA_CHECK(cudaGetLastError());
}

// ||got - first|| / ||first||; infinite when either holds a NaN (an unwritten element keeps the
// poison).
double relative_difference(const std::vector<uint16_t>& first, const std::vector<uint16_t>& got) {
  double num = 0, den = 0;
  for (size_t j = 0; j < first.size(); ++j) {
    const double x = bf16_to_float(first[j]), y = bf16_to_float(got[j]);
    if (!std::isfinite(x) || !std::isfinite(y)) return INFINITY;
    num += (y - x) * (y - x);
    den += x * x;
  }
  return std::sqrt(num / (den > 0 ? den : 1e-30));
}

}  // namespace

struct AttentionBench::Impl {
  std::string cudnn_lib;
  std::unique_ptr<CudnnAttention> cudnn;  // on the first cudnn kernel
};

AttentionBench::AttentionBench(std::string cudnn_lib) : impl_(std::make_unique<Impl>()) {
  impl_->cudnn_lib = std::move(cudnn_lib);
}
AttentionBench::~AttentionBench() = default;

std::string AttentionBench::cudnn_description() const {
  const CudnnAttention* c = impl_->cudnn.get();
  if (c == nullptr) return "";
  if (!c->available()) return c->unavailable_reason();
  return cudnn_version_text(c->version()) + " (" + c->library_path() + ")";
}

AttentionBenchResult AttentionBench::time(const AttentionBenchShape& s,
                                          const std::vector<std::string>& kernels,
                                          const std::vector<int>& repeats) {
  if (s.tokens < 1 || s.num_heads < 1 || s.num_kv_heads < 1 || s.num_heads % s.num_kv_heads != 0 ||
      s.head_dim < 8 || s.head_dim % 8 != 0)
    throw InputError("bench-attention: bad shape");
  if (repeats.size() != kernels.size())
    throw InputError("bench-attention: one repeat count a kernel");
  for (const std::string& k : kernels)
    if (!attention_bench_kernel_known(k))
      throw InputError(
          "bench-attention: kernel: expected flash, flash-64, flash-128, scalar or cudnn, found '" +
          k + "'");
  const size_t t = static_cast<size_t>(s.tokens);
  const size_t q_n = t * s.num_heads * s.head_dim, kv_n = t * s.num_kv_heads * s.head_dim;
  CudaMemory q(q_n * 2), k(kv_n * 2), v(kv_n * 2), out(q_n * 2), slots(t * 4), pos(t * 4);
  // q in [-2, 2], k, v in [-1, 1]: scores of a few units after the 1/sqrt(d) scale.
  fill(q, q_n, 1, -2.f, 2.f);
  fill(k, kv_n, 2, -1.f, 1.f);
  fill(v, kv_n, 3, -1.f, 1.f);
  std::vector<int32_t> h_pos(t);
  std::iota(h_pos.begin(), h_pos.end(), 0);
  MEGAOPS_CUDA_CHECK(cudaMemset(slots.ptr, 0, t * 4));
  MEGAOPS_CUDA_CHECK(cudaMemcpy(pos.ptr, h_pos.data(), t * 4, cudaMemcpyHostToDevice));
  CudaStream stream;

  PrefillAttentionParams p;
  p.q = static_cast<const bf16*>(q.ptr);
  p.k_cache = static_cast<const bf16*>(k.ptr);
  p.v_cache = static_cast<const bf16*>(v.ptr);
  p.slots = static_cast<const int32_t*>(slots.ptr);
  p.positions = static_cast<const int32_t*>(pos.ptr);
  p.out = static_cast<bf16*>(out.ptr);
  p.t = s.tokens;
  p.num_heads = s.num_heads;
  p.num_kv_heads = s.num_kv_heads;
  p.head_dim = s.head_dim;
  p.max_seq = s.tokens;
  p.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  p.launch = LaunchOptions{stream.s, false};
  // The same sequence for cuDNN: slot 0's rows are the whole cache.
  CudnnAttentionParams cp;
  cp.q = p.q;
  cp.k = p.k_cache;
  cp.v = p.v_cache;
  cp.out = p.out;
  cp.t_q = cp.t_kv = s.tokens;
  cp.num_heads = s.num_heads;
  cp.num_kv_heads = s.num_kv_heads;
  cp.head_dim = s.head_dim;
  cp.scale = p.scale;
  cp.stream = stream.s;

  AttentionBenchResult r;
  std::vector<uint16_t> first(q_n), got(q_n);  // the first kernel's output, and the current one's
  bool have_first = false;
  for (size_t i = 0; i < kernels.size(); ++i) {
    AttentionBenchTime bt;
    bt.kernel = kernels[i];
    const bool cudnn = kernels[i] == "cudnn", flash = !cudnn && kernels[i] != "scalar";
    bt.block_q = kernels[i] == "flash-64"    ? 64
                 : kernels[i] == "flash-128" ? 128
                 : flash                     ? prefill_attention_flash_block_q(p)
                                             : 0;
    if (cudnn && !impl_->cudnn) impl_->cudnn = std::make_unique<CudnnAttention>(impl_->cudnn_lib);
    auto launch = [&] {
      if (cudnn) {
        const cudaError_t err = impl_->cudnn->run(cp);
        if (err != cudaSuccess) throw DeviceError("bench-attention: " + impl_->cudnn->last_error());
        return;
      }
      MEGAOPS_CUDA_CHECK(flash ? launch_prefill_attention_flash(p, bt.block_q)
                               : launch_prefill_attention(p));
    };
    MEGAOPS_CUDA_CHECK(cudaMemsetAsync(out.ptr, 0xff, q_n * 2, stream.s));  // NaN poison
    if (cudnn) {
      // The warm-up builds the shape's graph: timed apart, and a shape cuDNN cannot run is a row
      // with its reason, not an abort.
      const double built_before = impl_->cudnn->build_ms();
      const cudaError_t err = impl_->cudnn->run(cp);
      bt.build_ms = impl_->cudnn->build_ms() - built_before;
      if (err == cudaErrorNotSupported) {
        bt.error = impl_->cudnn->last_error();
        r.times.push_back(bt);
        continue;
      }
      if (err != cudaSuccess) throw DeviceError("bench-attention: " + impl_->cudnn->last_error());
    } else {
      launch();  // warm-up
    }
    MEGAOPS_CUDA_CHECK(cudaStreamSynchronize(stream.s));
    // The first kernel that ran is the reference (its difference: 0, or infinite with a NaN).
    std::vector<uint16_t>& mine = have_first ? got : first;
    MEGAOPS_CUDA_CHECK(cudaMemcpy(mine.data(), out.ptr, q_n * 2, cudaMemcpyDeviceToHost));
    have_first = true;
    bt.rel_diff = relative_difference(first, mine);
    const std::vector<float> ms = timed_runs_ms(stream.s, repeats[i], launch);
    bt.median_ms = ms[ms.size() / 2];
    bt.min_ms = ms.front();
    bt.max_ms = ms.back();
    r.times.push_back(bt);
  }
  return r;
}

double time_gemm_ceiling_ms(int n, int repeats) {
  PrefillGemmCase c;
  c.m = c.n = c.k = n;
  c.path = "lt-bf16";
  c.repeats = repeats;
  return time_prefill_gemm(c).median_us * 1e-3;
}

}  // namespace megaops
