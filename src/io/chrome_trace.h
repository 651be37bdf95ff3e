// Timeline traces of one decode step (`megaops trace`): what the kernels' tile hooks recorded
// (kernels/tile_sync.cuh, TileTraceRecord), turned into a Chrome-trace / Perfetto JSON. Host code
// only: no CUDA types, testable without a GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace megaops {

// One CTA of one op: waited for its producers over [wait_start, wait_end), worked over
// [wait_end, work_end). Times in ns of the GPU's global timer.
struct TraceEvent {
  std::string op;
  uint32_t op_index = 0;  // position of the op in the step
  uint32_t block = 0;     // linear CTA index within the op's grid
  uint32_t smid = 0;
  uint64_t wait_start_ns = 0, wait_end_ns = 0, work_end_ns = 0;
};

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
