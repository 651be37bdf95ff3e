// Decode attention through block tables against the contiguous cache (see
// attention_decode_bench.h). Both layouts read the same device buffers: the contiguous launch
// walks each sequence's rows in place, the paged one the same rows as blocks in the case's order
// (shuffled: block ids a random permutation of every block of the layer), so the bytes read, the
// grids and the arithmetic are the same and only the addressing differs. Each repeat replays a
// captured graph of `launches` launches cycling through the layers, alternating the two layouts.
#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "core/counter_rng.h"
#include "core/cuda_check.h"
#include "core/cuda_owners.h"
#include "core/error.h"
#include "kernels/attention.cuh"
#include "kernels/attention_decode_bench.h"

namespace megaops {

namespace {

// bf16 values in [-1, 1) from the counter RNG.
__global__ void decode_bench_fill_kernel(uint16_t* p, size_t count, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x)
    p[i] = static_cast<uint16_t>(__float_as_uint(-1.0f + 2.0f * counter_uniform(seed, i, 0)) >> 16);
}

// Caches together at least this many bytes, so a launch's keys are not left in L2 by the launch
// before it (an H100's and H200's L2 hold 50-60 MB).
constexpr double BENCH_CACHE_BYTES = 512e6;
constexpr int BENCH_MAX_LAYERS = 64;
constexpr int BENCH_MIN_LAUNCHES = 16;

}  // namespace

DecodePagedBenchResult time_decode_attention_paged(const DecodePagedBenchCase& c) {
  if (c.batch < 1 || c.context < 1 || c.num_heads < 1 || c.num_kv_heads < 1 ||
      c.num_heads % c.num_kv_heads != 0 || c.head_dim < 8 || c.head_dim % 8 != 0 || c.repeats < 1 ||
      !kv_block_size_ok(c.block_size))
    throw InputError("bench-attention --paged: bad case (batch, context, heads, block size)");
  const int bs = c.block_size, stride = (c.context + bs - 1) / bs;
  const size_t row = static_cast<size_t>(c.num_kv_heads) * c.head_dim;
  // A layer: batch sequences of `stride` blocks (max_seq = stride * bs positions each).
  const int max_seq = stride * bs;
  const size_t layer_elems = static_cast<size_t>(c.batch) * max_seq * row;
  DecodePagedBenchResult r;
  r.kv_bytes = 2.0 * c.batch * c.context * row * 2;
  r.layers = std::clamp(static_cast<int>(std::ceil(BENCH_CACHE_BYTES / (2.0 * layer_elems * 2))), 1,
                        BENCH_MAX_LAYERS);
  r.launches = std::max(r.layers, BENCH_MIN_LAUNCHES);
  std::vector<std::unique_ptr<CudaMemory>> k, v;
  for (int l = 0; l < r.layers; ++l) {
    k.push_back(std::make_unique<CudaMemory>(layer_elems * 2));
    v.push_back(std::make_unique<CudaMemory>(layer_elems * 2));
    for (CudaMemory* m : {k.back().get(), v.back().get()}) {
      decode_bench_fill_kernel<<<1024, 256>>>(static_cast<uint16_t*>(m->ptr), layer_elems,
                                              static_cast<uint64_t>(2 * l + (m == v.back().get())));
      MEGAOPS_CUDA_CHECK(cudaGetLastError());
    }
  }
  const size_t q_n = static_cast<size_t>(c.batch) * c.num_heads * c.head_dim;
  CudaMemory q(q_n * 2), out(q_n * 2), ints(static_cast<size_t>(c.batch) * 2 * 4),
      table(static_cast<size_t>(c.batch) * stride * 4);
  decode_bench_fill_kernel<<<64, 256>>>(static_cast<uint16_t*>(q.ptr), q_n, 99);
  MEGAOPS_CUDA_CHECK(cudaGetLastError());
  std::vector<int32_t> h_ints(static_cast<size_t>(c.batch) * 2);
  for (int b = 0; b < c.batch; ++b) h_ints[b] = b, h_ints[c.batch + b] = c.context;
  std::vector<int32_t> h_table(static_cast<size_t>(c.batch) * stride);
  std::iota(h_table.begin(), h_table.end(), 0);
  if (c.order == PagedOrder::Shuffled) {
    std::mt19937_64 rng(7);
    std::shuffle(h_table.begin(), h_table.end(), rng);
  } else if (c.order == PagedOrder::Interleaved) {
    for (int b = 0; b < c.batch; ++b)
      for (int j = 0; j < stride; ++j)
        h_table[static_cast<size_t>(b) * stride + j] = j * c.batch + b;
  }
  MEGAOPS_CUDA_CHECK(
      cudaMemcpy(ints.ptr, h_ints.data(), h_ints.size() * 4, cudaMemcpyHostToDevice));
  MEGAOPS_CUDA_CHECK(
      cudaMemcpy(table.ptr, h_table.data(), h_table.size() * 4, cudaMemcpyHostToDevice));
  const size_t ws_n = decode_attention_workspace_floats(c.batch, c.num_heads, c.head_dim, max_seq);
  CudaMemory ws(std::max<size_t>(ws_n, 1) * 4);
  CudaMemory done(static_cast<size_t>(c.batch) * c.num_kv_heads * 4);
  MEGAOPS_CUDA_CHECK(cudaMemset(done.ptr, 0, static_cast<size_t>(c.batch) * c.num_kv_heads * 4));
  MEGAOPS_CUDA_CHECK(cudaDeviceSynchronize());
  CudaStream stream;

  DecodeAttentionParams p;
  p.q = static_cast<const bf16*>(q.ptr);
  p.slots = static_cast<const int32_t*>(ints.ptr);
  p.ctx_lens = static_cast<const int32_t*>(ints.ptr) + c.batch;
  p.out = static_cast<bf16*>(out.ptr);
  p.workspace = ws_n ? static_cast<float*>(ws.ptr) : nullptr;
  p.done_counters = static_cast<uint32_t*>(done.ptr);
  p.b = c.batch;
  p.num_heads = c.num_heads;
  p.num_kv_heads = c.num_kv_heads;
  p.head_dim = c.head_dim;
  p.max_seq = max_seq;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  p.launch = LaunchOptions{stream.s, false};
  CudaGraph graphs[2];  // [0] contiguous, [1] paged
  for (int paged = 0; paged < 2; ++paged) {
    p.kv = paged ? kv_pages(static_cast<const int32_t*>(table.ptr), bs, stride) : KvPages{};
    MEGAOPS_CUDA_CHECK(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < r.launches; ++i) {
      p.k_cache = static_cast<const bf16*>(k[i % r.layers]->ptr);
      p.v_cache = static_cast<const bf16*>(v[i % r.layers]->ptr);
      const cudaError_t err = launch_decode_attention(p);
      if (err != cudaSuccess) {
        cudaGraph_t g = nullptr;
        cudaStreamEndCapture(stream.s, &g);
        if (g) cudaGraphDestroy(g);
        MEGAOPS_CUDA_CHECK(err);
      }
    }
    MEGAOPS_CUDA_CHECK(cudaStreamEndCapture(stream.s, &graphs[paged].g));
    MEGAOPS_CUDA_CHECK(cudaGraphInstantiate(&graphs[paged].exec, graphs[paged].g, 0));
    MEGAOPS_CUDA_CHECK(cudaGraphLaunch(graphs[paged].exec, stream.s));  // warm-up
  }
  MEGAOPS_CUDA_CHECK(cudaStreamSynchronize(stream.s));
  // Alternated: a repeat of each layout after the other, so drift (clocks, temperature) hits both.
  std::vector<float> ms[2];
  for (int i = 0; i < c.repeats; ++i)
    for (int paged = 0; paged < 2; ++paged)
      ms[paged].push_back(timed_runs_ms(stream.s, 1, [&] {
        MEGAOPS_CUDA_CHECK(cudaGraphLaunch(graphs[paged].exec, stream.s));
      })[0]);
  for (auto& m : ms) std::sort(m.begin(), m.end());
  const double per = 1e3 / r.launches;  // ms a replay -> us a launch
  r.contiguous_us = ms[0][ms[0].size() / 2] * per;
  r.contiguous_min_us = ms[0].front() * per;
  r.contiguous_max_us = ms[0].back() * per;
  r.paged_us = ms[1][ms[1].size() / 2] * per;
  r.paged_min_us = ms[1].front() * per;
  r.paged_max_us = ms[1].back() * per;
  return r;
}

}  // namespace megaops
