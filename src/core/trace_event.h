// One CTA's record in a timeline trace of a decode step: what the executors hand back
// (Executor::take_overlap_trace) and the chrome trace writer (io/chrome_trace.h) reads. Plain data,
// shared by runtime/ and io/, so it lives in core/.
#pragma once

#include <cstdint>
#include <string>

namespace megaops {

// One CTA of one op: waited for its producers over [wait_start, wait_end), worked over
// [wait_end, work_end). Times in ns of the GPU's global timer.
struct TraceEvent {
  std::string op;
  uint32_t op_index = 0;  // position of the op in the step
  uint32_t block = 0;     // linear CTA index within the op's grid
  uint32_t smid = 0;
  int32_t tile = -1;  // a persistent region's task: the tile of the op it ran; -1: a whole launch
  uint64_t wait_start_ns = 0, wait_end_ns = 0, work_end_ns = 0;
};

}  // namespace megaops
