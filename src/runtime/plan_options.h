// A plan (graph/plan.h) onto the executor's options and back: the one place that knows which
// ExecutorOptions fields each plan field sets, so every command runs a plan the same way.
#pragma once

#include "graph/plan.h"
#include "runtime/executor_options.h"

namespace megaops {

// Sets every field of `eo` a plan covers (backend, PDL, the overlap step, the chain's folds and
// waits, the matmul dispatch, greedy sampling in the LM head, the prefill path and chunk) and
// leaves the rest (shapes, sampling, tensor parallelism, watchdogs, test knobs) as they are. The
// PDL chain is the overlap backend on one stream with overlap_pdl_chain and PDL off, as `bench
// --backend overlap --overlap-streams 1 --overlap-pdl-chain` runs it. InputError where this GPU
// cannot run a choice (decode.matmul.stream_kernel bulk off sm_90).
void apply_plan(const Plan& plan, ExecutorOptions& eo);

// The plan `eo` runs (source "flags": a command's step flags, as typed). apply_plan of it gives
// back `eo`'s plan fields, except what the backend does not read (regions outside the overlap
// backend, PDL outside the conventional one).
Plan plan_from_options(const ExecutorOptions& eo);

}  // namespace megaops
