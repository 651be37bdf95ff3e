// Token embedding gather: one CTA copies one row of the bf16 table into the fp32 residual stream.
// 16-byte loads (8 bf16) need hidden % 8 == 0 and a 16-byte aligned table and output, which every
// real checkpoint and our arenas satisfy; the launcher rejects anything else.
#include "kernels/embedding.cuh"

namespace megaops {
namespace {

constexpr int EMBEDDING_THREADS = 128;

// One tile = one output row. An id outside [0, vocab) fills the row with NaN instead of reading
// out of bounds, so a bad id is loud in any test or trace.
__device__ void embedding_row(const EmbeddingParams& p, int row) {
  const int id = p.ids[row];
  float4* out = reinterpret_cast<float4*>(p.out + static_cast<int64_t>(row) * p.hidden);
  const int vecs = p.hidden / 8;
  if (id < 0 || id >= p.vocab) {
    const float nan = __int_as_float(0x7fc00000);
    for (int v = threadIdx.x; v < vecs; v += blockDim.x) {
      out[2 * v] = make_float4(nan, nan, nan, nan);
      out[2 * v + 1] = make_float4(nan, nan, nan, nan);
    }
    return;
  }
  const uint4* src = reinterpret_cast<const uint4*>(p.table + static_cast<int64_t>(id) * p.hidden);
  for (int v = threadIdx.x; v < vecs; v += blockDim.x) {
    const uint4 raw = src[v];
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
    const float2 a = __bfloat1622float2(h[0]);
    const float2 b = __bfloat1622float2(h[1]);
    const float2 c = __bfloat1622float2(h[2]);
    const float2 d = __bfloat1622float2(h[3]);
    out[2 * v] = make_float4(a.x, a.y, b.x, b.y);
    out[2 * v + 1] = make_float4(c.x, c.y, d.x, d.y);
  }
}

__global__ void embedding_kernel(EmbeddingParams p) {
  // The ids come from the previous kernel (the sampler), so nothing is read before the wait. In
  // the overlap step the sampler ran in the previous step (complete before this one starts), so
  // the embedding has no wait counter and only signals.
  const uint32_t step = tile_sync_step(p.sync);
  tile_sync_wait(p.sync, step);
  pdl_launch_dependents();
  embedding_row(p, blockIdx.x);
  tile_sync_signal(p.sync, step);
}

bool aligned16(const void* ptr) {
  return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0;
}

}  // namespace

cudaError_t embedding_footprint(const EmbeddingParams& p, KernelFootprint* out) {
  return kernel_footprint(embedding_kernel, p.n, EMBEDDING_THREADS, 0, out);
}

cudaError_t preload_embedding_kernels() {
  return preload_kernel(embedding_kernel);
}

cudaError_t launch_embedding(const EmbeddingParams& p) {
  if (p.n < 0 || p.hidden <= 0 || p.hidden % 8 != 0 || p.vocab <= 0) return cudaErrorInvalidValue;
  if (p.n == 0) return cudaSuccess;
  if (!p.ids || !p.table || !p.out || !aligned16(p.table) || !aligned16(p.out))
    return cudaErrorInvalidValue;
  return launch_kernel(embedding_kernel, dim3(p.n), dim3(EMBEDDING_THREADS), 0, p.launch, p);
}

}  // namespace megaops
