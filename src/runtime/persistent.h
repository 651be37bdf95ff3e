// Persistent regions of the overlap step (docs/persistent-regions.md): a run of the step's ops
// that one resident launch of the region kernel (kernels/persistent_region_ops.cuh) executes
// instead of a launch per op. What each op's tasks run is the op's own kernel params, taken from
// the overlap op list (runtime/overlap_ops.cu) as the other backends launch them; where an op
// cannot run in a region, it says why, and a plan that puts it in one is refused naming the region
// and the op.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/matmul.cuh"
#include "kernels/persistent_region_ops.cuh"
#include "runtime/step_state.cuh"

namespace megaops {

// The region op of a launch: its kind and params, or kind None with `refusal` saying why the op
// cannot run in a region (empty when it can).
RegionOp region_op_of(const EmbeddingParams& p, std::string* refusal);
RegionOp region_op_of(const AddRmsNormParams& p, std::string* refusal);
RegionOp region_op_of(const QkvRopeParams& p, std::string* refusal);
RegionOp region_op_of(const DecodeAttentionParams& p, std::string* refusal);
RegionOp region_op_of(const SiluMulParams& p, std::string* refusal);
RegionOp region_op_of(const SampleParams& p, std::string* refusal);
RegionOp region_op_of(const StepAdvanceParams& p, std::string* refusal);
RegionOp region_op_of(const MatmulParams& p, std::string* refusal);

// One persistent region of an overlap step for one batch size, set up on the device: its
// schedule, semaphores, op table and launch counter (owned by the executor's device memory), and
// the launch's params (the watchdog and delays are filled in at each recording).
struct PersistentRegionRun {
  int region = 0;                 // index into ExecutorOptions::overlap_regions
  int first_op = 0, last_op = 0;  // overlap op ids (= step graph op indices)
  int resident = 0;               // CTAs that can be resident at once
  int tasks = 0;
  PersistentRegionParams params;
};

}  // namespace megaops
