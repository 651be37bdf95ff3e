// Token selection, one CTA of 1024 threads per row of logits (or, where the LM head's epilogue
// took the greedy argmax, SampleParams::argmax, one warp reading its packs), following ref::sample
// exactly, with the launch's parameters or each row's own (SampleParams::rows); a row holding NaN
// or Inf gets NONFINITE_LOGITS_TOKEN instead of a token, as there:
//   greedy: argmax, lowest index on ties;
//   sampled: p_i = exp((x_i - max) / T); the top-k threshold is the k-th largest logit, found by
//   bisection on the order-preserving integer key of the float (kernels/greedy_key.cuh; a
//   block-wide count per step, so it is exact); the top-p threshold is the largest key whose kept
//   mass reaches top_p of the top-k mass, by the same bisection with block-wide sums; the pick is
//   the first kept index, in index order, whose running sum exceeds u * (kept mass), via a
//   block-wide prefix scan over contiguous per-thread segments of the vocabulary.
// All reductions use a fixed order, so a row's result is deterministic. Float sums may still order
// differently from the CPU oracle, which can flip a pick whose running sum lands within rounding of
// the boundary (rare; the test allows for it).
// Cost: up to 2 * 32 bisection passes over the row, served from L2 (a 152K-entry row is 608 KB).
#include <climits>

#include "core/counter_rng.h"
#include "kernels/greedy_key.cuh"
#include "kernels/sampling.cuh"

namespace megaops {
namespace {

constexpr int SAMPLE_THREADS = 1024;
constexpr int SAMPLE_WARPS = SAMPLE_THREADS / 32;

struct SampleShared {
  float f[SAMPLE_WARPS];
  int i[SAMPLE_WARPS];
};

// Block-wide reductions: every thread returns the same value. Each ends with a barrier so the
// scratch can be reused by the next call at once.
__device__ float block_sum(float v, SampleShared& sm) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (lane == 0) sm.f[warp] = v;
  __syncthreads();
  v = sm.f[lane];
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  __syncthreads();
  return v;
}

enum class IntReduce { Add, Min, Max };

template <IntReduce OP>
__device__ __forceinline__ int warp_reduce_int(int v) {
  if constexpr (OP == IntReduce::Add) return __reduce_add_sync(0xffffffffu, v);
  if constexpr (OP == IntReduce::Min) return __reduce_min_sync(0xffffffffu, v);
  return __reduce_max_sync(0xffffffffu, v);
}

// Sum (a count), minimum or maximum of an int over the block.
template <IntReduce OP>
__device__ int block_reduce_int(int v, SampleShared& sm) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_reduce_int<OP>(v);
  if (lane == 0) sm.i[warp] = v;
  __syncthreads();
  v = warp_reduce_int<OP>(sm.i[lane]);
  __syncthreads();
  return v;
}

// (value, index) with the larger value winning and the lower index breaking ties.
__device__ __forceinline__ void argmax_merge(float& v, int& i, float ov, int oi) {
  if (ov > v || (ov == v && oi < i)) v = ov, i = oi;
}

__device__ void block_argmax(float& v, int& i, SampleShared& sm) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int off = 16; off > 0; off /= 2)
    argmax_merge(v, i, __shfl_xor_sync(0xffffffffu, v, off), __shfl_xor_sync(0xffffffffu, i, off));
  if (lane == 0) sm.f[warp] = v, sm.i[warp] = i;
  __syncthreads();
  v = sm.f[lane], i = sm.i[lane];
#pragma unroll
  for (int off = 16; off > 0; off /= 2)
    argmax_merge(v, i, __shfl_xor_sync(0xffffffffu, v, off), __shfl_xor_sync(0xffffffffu, i, off));
  __syncthreads();
}

// Exclusive prefix sum over threads in thread order; `total` gets the sum of all.
__device__ float block_exclusive_scan(float v, float& total, SampleShared& sm) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float incl = v;
#pragma unroll
  for (int off = 1; off < 32; off *= 2) {
    const float y = __shfl_up_sync(0xffffffffu, incl, off);
    if (lane >= off) incl += y;
  }
  float excl = __shfl_up_sync(0xffffffffu, incl, 1);
  if (lane == 0) excl = 0.0f;
  if (lane == 31) sm.f[warp] = incl;
  __syncthreads();
  float w_incl = sm.f[lane];  // every warp scans the 32 warp totals the same way
#pragma unroll
  for (int off = 1; off < 32; off *= 2) {
    const float y = __shfl_up_sync(0xffffffffu, w_incl, off);
    if (lane >= off) w_incl += y;
  }
  const float w_excl = __shfl_sync(0xffffffffu, w_incl, warp == 0 ? 0 : warp - 1);
  total = __shfl_sync(0xffffffffu, w_incl, 31);
  __syncthreads();
  return warp == 0 ? excl : w_excl + excl;
}

// What one row draws with: the launch's parameters, or the row's own (SampleParams::rows).
struct RowDraw {
  float temperature;
  int top_k;
  float top_p;
  const SampleRow* own;  // the row's own parameters and stream, or null
};

__device__ __forceinline__ RowDraw row_draw(const SampleParams& p, int row) {
  if (p.rows == nullptr) return {p.temperature, p.top_k, p.top_p, nullptr};
  const SampleRow* r = p.rows + row;
  return {r->temperature, r->top_k, r->top_p, r};
}

// The row's uniform number: its own stream, or the launch's seed and step with the row's rng_rows
// entry (its index without one). Read only where the row samples (the step may be null otherwise).
__device__ __forceinline__ float row_uniform(const SampleParams& p, const RowDraw& d, int row) {
  if (d.own != nullptr) return counter_uniform(d.own->seed, d.own->rng_row, d.own->step);
  const int rng_row = p.rng_rows != nullptr ? p.rng_rows[row] : row;
  return counter_uniform(p.seed, static_cast<uint64_t>(rng_row), *p.step);
}

// One tile = one row. Must be called by all SAMPLE_THREADS threads.
__device__ void sample_row(const SampleParams& p, int row, SampleShared& sm) {
  const int tid = threadIdx.x, n = p.vocab;
  const float* x = p.logits + static_cast<int64_t>(row) * p.ld;
  const RowDraw draw = row_draw(p, row);
  if (p.argmax != nullptr) {
    // Per-row parameters with the LM head's argmax packs (launch_sample admits no other case):
    // a greedy row's token is its pack; every row's pack is zeroed for the next LM head. Every
    // thread reads the pack before the barrier, thread 0 clears it after.
    const unsigned long long pack = p.argmax[row];
    __syncthreads();
    if (tid == 0) p.argmax[row] = 0ull;
    if (draw.temperature <= 0.0f) {
      if (tid == 0) p.tokens[row] = greedy_unpack_token(pack);
      return;
    }
  }

  // Sixteen loads in flight per thread: a plain strided loop waits one memory latency per element
  // (55 us per 128K-logit row measured on the H200). argmax_merge breaks ties by index, so the
  // order of merging does not matter.
  constexpr int UNROLL = 16;
  float max_v = -INFINITY;
  int max_i = INT_MAX;
  int broken = 0;  // a NaN or Inf seen by this thread
  int i = tid;
  for (; i + (UNROLL - 1) * SAMPLE_THREADS < n; i += UNROLL * SAMPLE_THREADS) {
    float v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v[u] = x[i + u * SAMPLE_THREADS];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      argmax_merge(max_v, max_i, v[u], i + u * SAMPLE_THREADS);
      broken |= !logit_is_finite(v[u]);
    }
  }
  for (; i < n; i += SAMPLE_THREADS) {
    argmax_merge(max_v, max_i, x[i], i);
    broken |= !logit_is_finite(x[i]);
  }
  block_argmax(max_v, max_i, sm);
  // A row with a non-finite logit gets no token (kernels/greedy_key.cuh), in both modes.
  if (block_reduce_int<IntReduce::Max>(broken, sm) != 0) {
    if (tid == 0) p.tokens[row] = NONFINITE_LOGITS_TOKEN;
    return;
  }
  if (draw.temperature <= 0.0f) {
    if (tid == 0) p.tokens[row] = max_i;
    return;
  }

  const float temp = draw.temperature;
  auto prob = [&](float v) { return expf((v - max_v) / temp); };
  const uint32_t max_key = greedy_order_key(max_v);

  // Top-k: the largest key with count(key_i >= key) >= k is the k-th largest logit's key.
  uint32_t keep_key = 0;
  if (draw.top_k > 0 && draw.top_k < n) {
    uint64_t lo = 0, hi = static_cast<uint64_t>(max_key) + 1;  // count(lo) = n, count(hi) = 0
    while (hi - lo > 1) {
      const uint32_t mid = static_cast<uint32_t>((lo + hi) / 2);
      int c = 0;
      for (int i = tid; i < n; i += SAMPLE_THREADS) c += greedy_order_key(x[i]) >= mid;
      if (block_reduce_int<IntReduce::Add>(c, sm) >= draw.top_k)
        lo = mid;
      else
        hi = mid;
    }
    keep_key = static_cast<uint32_t>(lo);
  }

  // Top-p: the largest key whose kept mass reaches top_p of the top-k mass. Each float sum runs in
  // one fixed order, and dropping terms can only lower it, so the predicate is monotone.
  if (draw.top_p < 1.0f) {
    float s = 0.0f;
    for (int i = tid; i < n; i += SAMPLE_THREADS) {
      const float v = x[i];
      if (greedy_order_key(v) >= keep_key) s += prob(v);
    }
    const float target = draw.top_p * block_sum(s, sm);
    uint64_t lo = keep_key, hi = static_cast<uint64_t>(max_key) + 1;
    while (hi - lo > 1) {
      const uint32_t mid = static_cast<uint32_t>((lo + hi) / 2);
      float m = 0.0f;
      for (int i = tid; i < n; i += SAMPLE_THREADS) {
        const float v = x[i];
        if (greedy_order_key(v) >= mid) m += prob(v);
      }
      if (block_sum(m, sm) >= target)
        lo = mid;
      else
        hi = mid;
    }
    keep_key = static_cast<uint32_t>(lo);
  }

  // Pick: thread t owns indices [t * seg, (t + 1) * seg), so a prefix scan over threads is a
  // prefix scan in index order.
  const float u = row_uniform(p, draw, row);
  const int seg = (n + SAMPLE_THREADS - 1) / SAMPLE_THREADS;
  const int begin = min(n, tid * seg), end = min(n, begin + seg);
  float local = 0.0f;
  int last_kept = -1;
  for (int i = begin; i < end; ++i) {
    const float v = x[i];
    if (greedy_order_key(v) >= keep_key) {
      const float pv = prob(v);
      local += pv;
      if (pv > 0.0f) last_kept = i;
    }
  }
  float total;
  const float excl = block_exclusive_scan(local, total, sm);
  const float target = u * total;
  int pick = INT_MAX;
  if (excl + local > target) {
    // The same additions in the same order as `local`: the segment's last kept index with p > 0
    // is reached with run == local, so a crossing is found whenever the segment has one.
    float run = 0.0f;
    for (int i = begin; i < end; ++i) {
      const float v = x[i];
      if (greedy_order_key(v) >= keep_key) {
        // A token whose p underflowed to 0 is never picked, as in the reference.
        const float pv = prob(v);
        run += pv;
        if (pv > 0.0f && excl + run > target) {
          pick = i;
          break;
        }
      }
    }
  }
  pick = block_reduce_int<IntReduce::Min>(pick, sm);
  // u * total can round up to total itself; then no prefix exceeds it and the last kept index is
  // the limit of the definition.
  if (pick == INT_MAX) pick = block_reduce_int<IntReduce::Max>(last_kept, sm);
  if (tid == 0) p.tokens[row] = pick < 0 ? max_i : pick;
}

__global__ void __launch_bounds__(SAMPLE_THREADS) sample_kernel(SampleParams p) {
  __shared__ SampleShared sm;
  // The logits and the step counter come from predecessors. The logits are read with ordinary
  // loads (coherent after the overlap step's acquire).
  const uint32_t step = tile_sync_step(p.sync);
  tile_sync_wait(p.sync, step);
  pdl_launch_dependents();
  sample_row(p, blockIdx.x, sm);
  tile_sync_signal(p.sync, step);
}

// Greedy rows whose argmax the LM head's epilogue took (SampleParams::argmax): one warp reads each
// row's pack, writes the token and zeroes the pack for the next step's epilogue. The pack comes
// from the predecessor (the LM head), after the wait.
constexpr int SAMPLE_ARGMAX_THREADS = 32;

__global__ void __launch_bounds__(SAMPLE_ARGMAX_THREADS) sample_argmax_kernel(SampleParams p) {
  const uint32_t step = tile_sync_step(p.sync);
  tile_sync_wait(p.sync, step);
  pdl_launch_dependents();
  for (int r = threadIdx.x; r < p.b; r += SAMPLE_ARGMAX_THREADS) {
    p.tokens[r] = greedy_unpack_token(p.argmax[r]);
    p.argmax[r] = 0ull;
  }
  tile_sync_signal(p.sync, step);
}

}  // namespace

cudaError_t sample_footprint(const SampleParams& p, KernelFootprint* out) {
  if (p.argmax != nullptr && p.rows == nullptr)
    return kernel_footprint(sample_argmax_kernel, 1, SAMPLE_ARGMAX_THREADS, 0, out);
  return kernel_footprint(sample_kernel, p.b, SAMPLE_THREADS, 0, out);
}

cudaError_t preload_sampling_kernels() {
  if (const cudaError_t err = preload_kernel(sample_kernel); err != cudaSuccess) return err;
  return preload_kernel(sample_argmax_kernel);
}

cudaError_t launch_sample(const SampleParams& p) {
  if (p.b < 0 || p.vocab <= 0 || p.ld < p.vocab || p.b > 0x7fffffff) return cudaErrorInvalidValue;
  if (p.b == 0) return cudaSuccess;
  if (!p.logits || !p.tokens) return cudaErrorInvalidValue;
  if (p.rows != nullptr)  // each row's own parameters: the full kernel, packs or not
    return launch_kernel(sample_kernel, dim3(p.b), dim3(SAMPLE_THREADS), 0, p.launch, p);
  const bool sampled = p.temperature > 0.0f;
  if (sampled && (!p.step || !(p.top_p > 0.0f))) return cudaErrorInvalidValue;
  if (p.argmax != nullptr) {
    if (sampled) return cudaErrorInvalidValue;  // the packs hold a greedy argmax only
    return launch_kernel(sample_argmax_kernel, dim3(1), dim3(SAMPLE_ARGMAX_THREADS), 0, p.launch,
                         p);
  }
  return launch_kernel(sample_kernel, dim3(p.b), dim3(SAMPLE_THREADS), 0, p.launch, p);
}

}  // namespace megaops
