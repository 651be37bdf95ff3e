// Token embedding: residual[r, :] = table[ids[r], :] as fp32 (the residual stream is fp32).
// Requires hidden % 8 == 0 and 16-byte aligned table and out (16-byte loads); an id outside
// [0, vocab) yields a NaN row instead of an out-of-bounds read.
#pragma once

#include "kernels/common.cuh"
#include "kernels/tile_sync.cuh"

namespace megaops {

struct EmbeddingParams {
  const int32_t* ids = nullptr;  // [n], validated < vocab on the host
  const bf16* table = nullptr;   // [vocab, hidden]
  float* out = nullptr;          // [n, hidden]
  int n = 0, hidden = 0, vocab = 0;
  TileSync sync;  // overlap hooks (kernels/tile_sync.cuh); one CTA per row, one signal per CTA
  LaunchOptions launch;
};

cudaError_t launch_embedding(const EmbeddingParams& p);
// The launch launch_embedding(p) makes (grid = n, not cappable) and its occupancy.
cudaError_t embedding_footprint(const EmbeddingParams& p, KernelFootprint* out);
cudaError_t preload_embedding_kernels();

}  // namespace megaops
