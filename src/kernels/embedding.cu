// Token embedding gather: one CTA copies one row of the bf16 table into the fp32 residual stream.
// 16-byte loads (8 bf16) need hidden % 8 == 0 and a 16-byte aligned table and output, which every
// real checkpoint and our arenas satisfy; the launcher rejects anything else.
#include "kernels/embedding.cuh"
#include "kernels/embedding_row.cuh"

namespace megaops {
namespace {

constexpr int EMBEDDING_THREADS = 128;

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
