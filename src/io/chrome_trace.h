// Timeline traces of one decode step (`megaops trace`): what the kernels' tile hooks recorded
// (kernels/tile_sync.cuh, TileTraceRecord), turned into a Chrome-trace / Perfetto JSON. Host code
// only: no CUDA types, testable without a GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/trace_event.h"

namespace megaops {

struct TraceMeta {
  std::string model, gpu, backend;
  int batch = 0;
  uint64_t dropped = 0;  // records past the buffer's capacity
};

// Chrome trace JSON ("traceEvents", complete events "X", microseconds from the earliest wait):
// one process per SM, one thread per concurrent CTA slot on it (greedy packing of the SM's CTAs
// by start time), a "wait" and a "work" slice per CTA named after its op, with the op index and
// CTA in args. Throws InputError on an event whose times go backwards.
std::string chrome_trace_json(const std::vector<TraceEvent>& events, const TraceMeta& meta);

// Lane (concurrent CTA slot) of each event on its SM, in the input order: the first lane whose
// previous CTA ended at or before this one's wait started. Exposed for tests.
std::vector<int> trace_lanes(const std::vector<TraceEvent>& events);

}  // namespace megaops
