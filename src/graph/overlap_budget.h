// CTA budgets and barriers of the overlap step (docs/overlap-design.md decision 1, DESIGN rule 2),
// as a pure function of the ops' footprints, so the deadlock-freedom conditions can be tested on
// any CPU. The overlap executor (runtime/conventional.cu) fills the footprints from the occupancy
// API and launches with the result.
//
// Which kernels can be live together: op k runs on stream k % W, behind op k - W, so it cannot
// start before op k - W completed. If op O is the oldest op of the step not yet completed, every
// live op is in O, ..., O + W - 1 (the last op, step_advance, runs alone after the join).
//
// Why that cannot deadlock when the budgets hold: O's producers (earlier ops) are complete, so
// O's resident CTAs never wait; they finish, and O progresses as long as one of its CTAs can become
// resident. The only stuck state is: all later live ops' CTAs resident (at most their budgets),
// spinning, and no SM with room for one CTA of O. Each CTA of kernel k takes at most 1/occ_k of
// every SM resource (occ_k = its occupancy alone on an SM), and an SM can take a CTA of O if its
// load sum(n_k / occ_k) <= 1 - 1/occ_O. So the stuck state is impossible if for every O, over the
// later live ops L(O):
//   (A) sum_{k in L} ctas_k <= SMs - 1     (some SM holds none of their CTAs), or
//   (B) sum_{k in L} ctas_k / occ_k <= SMs * (1 - 1/occ_O)     (some SM has room, by averaging).
// (B) needs every SM to be able to host any kernel's CTA, which holds when all kernels want one
// L1 / shared-memory split (preload_kernel asks every kernel for the maximum shared carveout).
//
// Segments: a barrier before each region (ExecutorOptions::overlap_regions) and after each opaque
// (vendor) op means no op past it is live while O is incomplete, so L(O) stops there; an opaque
// op's own L(O) is empty (its CTAs' needs are unknown: cuBLASLt's Hopper kernels launch clusters
// of two CTAs), and in a serial region one op runs at a time.
//
// Budgets: every cappable op gets cap_k = max(1, floor(c_k * occ_k * SMs)) with its own fraction
// c_k, all starting at 1; fixed-grid ops keep their grids. While some O violates both conditions,
// each cappable later op of a violating O that still has more than one CTA loses 20% of c_k (once
// per pass). Where no later op of a violating window can shrink, a barrier goes before the
// window's last op (a new segment) until every window holds: the step never has to be refused,
// it only overlaps less.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace megaops {

struct BudgetOp {
  // Inputs.
  bool cappable = false;  // the grid follows the cap; else fixed by the shape
  bool opaque = false;    // a vendor kernel: a barrier follows it
  // An opaque op issued on its producer's stream (no gate kernel): overlap_sync_plan.
  bool stream_ordered = false;
  int blocks_per_sm = 1;  // occupancy alone on an SM (>= 1)
  int region = 0;         // index into region_serial
  // CTAs the op launches with cap (0 = its default grid). Called in op order on every pass (a
  // footprint may depend on the cap of the op before it).
  std::function<int(int cap)> ctas_at;
  // Outputs.
  int cap = 0;
  int ctas = 0;
  int segment = 0;  // ops of one segment may be live together; barriers between segments
};

// Chooses caps and segments for ops[0 .. n-2]; the last op (step_advance) gets cap 0, one CTA.
// W: live kernels at most (streams); sms: the GPU's SMs. Throws Error if the caps do not settle
// (an internal error: shrinking and barriers always end).
void choose_overlap_budgets(std::vector<BudgetOp>& ops, const std::vector<char>& region_serial,
                            int W, int sms);

// Whether the window of op o (the ops that may be live with it) meets (A) or (B); for tests and
// the executor's own check.
bool overlap_window_holds(const std::vector<BudgetOp>& ops, const std::vector<char>& region_serial,
                          int W, int sms, size_t o);

// How the ops of one overlap step are issued and ordered, after choose_overlap_budgets: the
// stream of each op, whether it waits for its predecessor's counter, and whether it signals its
// own. Segment by segment, op k goes on stream (k - first op of the segment) % W, in a serial
// region on stream 0, and a stream-ordered vendor op (always its segment's last) on its
// predecessor's stream. Op k waits for op k - 1 only where nothing else orders them: not as a
// segment's first op (the barrier before it waited for everything), not on op k - 1's stream
// (stream order), not after a stream-ordered vendor op (the barrier after it). An op signals only
// if its successor waits for it. step_advance (the last op) runs on the executor's stream after
// the join (stream -1) and neither waits nor signals. Counters of ops that do not signal would fall
// behind the step while another plan or batch may wait on them, so step_advance brings every
// counter to the step's target (runtime/step_state.cuh).
// The PDL chain (`chain`, ExecutorOptions::overlap_pdl_chain, W = 1): op k also waits for op
// k - 1 on the same stream, where both are own kernels (neither stream-ordered), because its
// launch is programmatic (PDL) and the stream no longer orders it; the rules above still drop
// the wait at a segment's first op and after a vendor op.
struct OverlapSyncOp {
  int stream = 0;
  bool waits = false;
  bool signals = false;
};
std::vector<OverlapSyncOp> overlap_sync_plan(const std::vector<BudgetOp>& ops,
                                             const std::vector<char>& region_serial, int W,
                                             bool chain = false);

// The cross-stream edges of the barrier between a segment, ops [prev_begin, prev_end) of `plan`,
// and the next one, ops [prev_end, next_end): every stream that runs an op of the next segment
// waits for each other stream that ran an op of the previous segment (an event recorded there
// after its last op). Stream order does the rest (a stream's own earlier ops, and whatever the
// previous segment's ops were ordered after), so every op of the next segment still starts after
// every op of the previous one has completed, as a full W x W barrier guarantees, but there is no
// edge where both segments run on one stream (a serial region; a segment ending in a vendor GEMM
// on its producer's stream, followed by one on the same stream) and none to or from a stream
// with no work there. Sorted by (waiter, recorded), each pair once.
struct BarrierEdge {
  int waiter = 0, recorded = 0;
};
std::vector<BarrierEdge> overlap_barrier_edges(const std::vector<OverlapSyncOp>& plan,
                                               size_t prev_begin, size_t prev_end, size_t next_end);

}  // namespace megaops
