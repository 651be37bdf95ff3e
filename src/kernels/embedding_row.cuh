// One row of the token embedding gather (kernels/embedding.cuh), shared by the embedding kernel
// (kernels/embedding.cu) and a persistent region's embedding task
// (kernels/persistent_region_ops.cu).
#pragma once

#include "kernels/embedding.cuh"

namespace megaops {

#if defined(__CUDACC__)

// One tile = one output row, copied by the CTA's threads (any number). An id outside [0, vocab)
// fills the row with NaN instead of reading out of bounds, so a bad id is loud in any test or
// trace.
__device__ __forceinline__ void embedding_row(const EmbeddingParams& p, int row) {
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

#endif  // __CUDACC__

}  // namespace megaops
