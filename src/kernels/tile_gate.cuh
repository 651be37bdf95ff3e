// A kernel without tile hooks (a vendor GEMM) inside the overlap step (docs/overlap-design.md,
// decision 5): on the op's stream, a one-CTA gate kernel waits for the op's producers (acquire,
// watchdog on), the unmodified kernel runs behind it in stream order, and a one-CTA signal kernel
// behind that adds the op's share to its counter (release). The counters only grow and the step
// comes from device memory, so the sequence replays in a CUDA graph like every other op; a
// captured cuStreamWaitValue32 cannot do this (its target is frozen at capture).
//
// Chunks: an op may run as C launches of the vendor kernel (for example along N); chunk i is
// followed by a signal of tile_gate_chunk_share(i, C), so the op adds TILE_SYNC_STEP_SUM per step
// in all and a consumer that waits for the whole tensor waits for every chunk.
#pragma once

#include "kernels/tile_sync.cuh"

namespace megaops {

// Waits until every producer counter of `sync` reaches its target for the running step. With
// tracing on, appends one record for the op (wait start and end; its work is the vendor kernel
// behind the gate, which the trace does not see). The gate never signals.
cudaError_t launch_tile_gate(const TileSync& sync, cudaStream_t stream);

// Adds `amount` to sync.signal_counter (release); honours sync.delay (stress tests). Everything
// the kernels before it on `stream` wrote is visible to a consumer that acquires the counter.
cudaError_t launch_tile_signal(const TileSync& sync, uint32_t amount, cudaStream_t stream);

// TILE_SYNC_STEP_SUM split over `chunks` signals: chunk 0 takes the remainder.
inline uint32_t tile_gate_chunk_share(int chunk, int chunks) {
  const uint32_t c = static_cast<uint32_t>(chunks);
  return TILE_SYNC_STEP_SUM / c + (chunk == 0 ? TILE_SYNC_STEP_SUM % c : 0u);
}

// What the gate kernel occupies while it waits (one CTA).
cudaError_t tile_gate_footprint(KernelFootprint* out);
cudaError_t preload_tile_gate_kernels();

}  // namespace megaops
