// Which requests run in the next step, and how many of their tokens: continuous batching as
// vLLM's scheduler does it. There is no prefill or decode phase: each request has tokens whose
// K/V are not computed yet (a whole prompt when it arrives, one token per step once it decodes),
// and each step hands out a token budget:
//   1. running requests first, oldest first: each gets min(its uncomputed tokens, the prefill
//      chunk cap, what is left of the budget), so decode rows are never starved by a prompt;
//      when the KV blocks for that are missing, the newest running request is preempted (its
//      blocks freed, its tokens recomputed later from the front of the queue) until they are
//      there (or the request itself was the newest);
//   2. then, unless something was preempted in this step, waiting requests in arrival order join
//      while budget, running slots and blocks last (a prompt longer than the budget runs in chunks
//      over several steps); the first one that cannot get blocks stays at the head of the queue.
//      A joining request first takes the cached blocks of its longest cached prefix
//      (BlockManager::match_prefix) and computes from there; at least its last token is computed,
//      for the logits it samples from.
#pragma once

#include <deque>
#include <vector>

#include "engine/block_manager.h"
#include "engine/request.h"

namespace megaops {

struct ScheduledSeq {
  Request* request = nullptr;
  int num_tokens = 0;  // tokens [num_computed, num_computed + num_tokens) run this step
};

struct Schedule {
  std::vector<ScheduledSeq> seqs;
  int preempted = 0;
  // Prefix caching: prompt tokens looked up for the requests admitted in this step, and those
  // found cached (whose K/V they take from the cache instead of computing them).
  int64_t prefix_queried = 0, prefix_hit = 0;
};

class Scheduler {
 public:
  Scheduler(BlockManager& blocks, int max_running, int token_budget, int max_prefill_chunk);

  void add(Request* r);     // to the back of the waiting queue
  void remove(Request* r);  // from its queue, its blocks released
  Schedule schedule();

  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_running() const { return static_cast<int>(running_.size()); }

 private:
  void preempt(Request* r);
  BlockManager& blocks_;
  int max_running_, token_budget_, max_prefill_chunk_;
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;  // in the order they joined
};

}  // namespace megaops
