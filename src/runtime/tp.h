// Tensor parallelism's own state (ExecutorOptions::tp, graph/tensor_parallel.h): the peer
// reduce of TpReduce::Peer (kernels/tp_reduce.cuh). The functions are ExecutorCore's
// (runtime/executor_core.h), in tp.cu: the rank's configuration, the all-reduce and peer reduce
// of the row-parallel projections, the gathered LM head, the IPC set-up and teardown.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sync/error_record.h"

namespace megaops {

// TpReduce::Peer (kernels/tp_reduce.cuh): one allocation with this rank's partial slots
// ([2 x layers][max_batch x hidden] floats, O then down of each layer) and their counters, which
// the other ranks map; their mappings; the decode step counter; a watchdog for the waits.
struct PeerReduce {
  void* base = nullptr;
  size_t slot_floats = 0, counters_offset = 0;
  std::vector<char*> rank_base;  // every rank's allocation as seen here (own = base)
  uint32_t* step = nullptr;
  std::unique_ptr<WatchdogRecord> watchdog;
  std::vector<std::string> site_names;
  bool ready = false;  // set up on every rank: only then may the destructor wait for the peers
};

}  // namespace megaops
