// The row-parallel projections' all-reduce through peer memory instead of NCCL
// (ExecutorOptions::tp_reduce = TpReduce::Peer): every rank's O / down projection writes its
// partial sums into its own slot of a buffer the other ranks have mapped (CUDA IPC), then one
// kernel per rank signals "my partial is written" on its own counter (release at system scope),
// waits for every rank's counter (acquire at system scope, watchdog-bounded, through NVLink) and
// adds the ranks' partials in rank order into its local output. Every rank adds in the same order,
// so all ranks hold the same bits and sample the same tokens.
//
// Counters are monotonic like the overlap runtime's (DESIGN rule 3): one counter per (rank, site)
// gets +1 per decode step; in step s (1-based, from device memory) a rank waits for >= s. A slot
// is rewritten one step later; by then every peer has read it, because a rank reaches its next
// write of a slot only after waiting on the peers' later signals, which they release after their
// reads (stream order on the peer).
#pragma once

#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/tile_sync.cuh"
#include "sync/error_record.h"

namespace megaops {

constexpr int TP_PEER_MAX = 8;  // ranks of one host

struct PeerReduceParams {
  const float* parts[TP_PEER_MAX] = {};        // every rank's partial sums, rank order (own too)
  const uint32_t* counters[TP_PEER_MAX] = {};  // every rank's counter of this site
  uint32_t* own_counter = nullptr;             // this rank's counter of this site (signalled)
  const uint32_t* step = nullptr;              // decode step, 1-based while a step runs
  float* out = nullptr;                        // the sum, local
  int ranks = 0;
  int64_t count = 0;  // floats per partial (rows x hidden)
  WatchdogParams watchdog;
  uint32_t site = 0;  // reported by the watchdog as the op
  LaunchOptions launch;
};

// cudaErrorInvalidValue on null pointers, ranks outside 1..TP_PEER_MAX or count < 1.
cudaError_t launch_tp_peer_reduce(const PeerReduceParams& p);

// Adds 1 to *step (one thread): the first node of a decode step under TpReduce::Peer.
cudaError_t launch_tp_step_advance(uint32_t* step, const LaunchOptions& launch);

cudaError_t preload_tp_reduce_kernels();

}  // namespace megaops
