// A plan (graph/plan.h) onto the executor's options and back: the one place that knows which
// ExecutorOptions fields each plan field sets, so every command runs a plan the same way.
#pragma once

#include <string>

#include "graph/plan.h"
#include "runtime/executor.h"
#include "runtime/executor_options.h"

namespace megaops {

// Sets every field of `eo` a plan covers (backend, PDL, the overlap step, the chain's folds and
// waits, the matmul dispatch, greedy sampling in the LM head, the prefill path and chunk; no
// regions: set_plan_regions sets them once the executor can name its ops) and leaves the rest
// (shapes, sampling, tensor parallelism, watchdogs, test knobs) as they are. The PDL chain is the
// overlap backend on one stream with overlap_pdl_chain and PDL off, as `bench
// --backend overlap --overlap-streams 1 --overlap-pdl-chain` runs it. InputError where this GPU
// cannot run a choice (decode.matmul.stream_kernel bulk off sm_90).
void apply_plan(const Plan& plan, ExecutorOptions& eo);

// The plan `eo` runs (source "flags": a command's step flags, as typed), regions included.
// apply_plan of it gives back `eo`'s plan fields, except the regions (set_plan_regions sets them on
// the executor) and what the backend does not read (PDL outside the conventional one).
Plan plan_from_options(const ExecutorOptions& eo);

// The plan's regions checked against the executor's op names (one error line naming `origin`, the
// field and the op) and set on `ex`; nothing without regions.
void set_plan_regions(const Plan& plan, const std::string& origin, Executor& ex);

}  // namespace megaops
