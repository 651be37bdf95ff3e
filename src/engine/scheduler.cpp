// See scheduler.h.
#include "engine/scheduler.h"

#include <algorithm>

namespace megaops {

Scheduler::Scheduler(BlockManager& blocks, int max_running, int token_budget, int max_prefill_chunk)
    : blocks_(blocks),
      max_running_(max_running),
      token_budget_(token_budget),
      max_prefill_chunk_(max_prefill_chunk) {}

void Scheduler::add(Request* r) {
  r->state = Request::State::Waiting;
  waiting_.push_back(r);
}

void Scheduler::remove(Request* r) {
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), r), waiting_.end());
  running_.erase(std::remove(running_.begin(), running_.end(), r), running_.end());
  blocks_.release(r->blocks, &r->prefix);
}

// Recomputation: the request keeps its tokens, loses its cache, and goes back to the head of the
// queue (it arrived before everything waiting there).
void Scheduler::preempt(Request* r) {
  running_.erase(std::remove(running_.begin(), running_.end(), r), running_.end());
  blocks_.release(r->blocks, &r->prefix);
  r->num_computed = 0;
  r->state = Request::State::Waiting;
  ++r->preemptions;
  waiting_.push_front(r);
}

Schedule Scheduler::schedule() {
  Schedule out;
  int budget = token_budget_;
  auto chunk = [&](const Request* r) {
    int n = r->num_tokens() - r->num_computed;
    if (max_prefill_chunk_ > 0) n = std::min(n, max_prefill_chunk_);
    return std::min(n, budget);
  };

  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i];
    const int n = chunk(r);
    if (n <= 0) {
      ++i;
      continue;
    }
    bool fits = blocks_.grow(r->blocks, static_cast<int64_t>(r->num_computed) + n);
    while (!fits) {
      // The newest running request has not been scheduled yet in this step (requests are
      // scheduled oldest first), unless it is r itself.
      Request* victim = running_.back();
      preempt(victim);
      ++out.preempted;
      if (victim == r) break;
      fits = blocks_.grow(r->blocks, static_cast<int64_t>(r->num_computed) + n);
    }
    if (!fits) break;  // r was the newest: it waits at the head of the queue
    out.seqs.push_back({r, n});
    budget -= n;
    ++i;
  }

  if (out.preempted > 0) return out;
  while (!waiting_.empty() && budget > 0 && static_cast<int>(running_.size()) < max_running_) {
    Request* r = waiting_.front();
    int cached = 0;
    if (r->num_computed == 0 && r->blocks.empty())
      r->num_computed = cached = blocks_.match_prefix([r](int i) { return r->token_at(i); },
                                                      r->num_tokens() - 1, r->blocks, r->prefix);
    const int n = chunk(r);
    if (!blocks_.grow(r->blocks, static_cast<int64_t>(r->num_computed) + n)) {
      if (cached > 0) {  // it waits as it was; the blocks stay cached
        blocks_.release(r->blocks, &r->prefix);
        r->num_computed = 0;
      }
      break;
    }
    out.prefix_queried += r->num_tokens() - 1;
    out.prefix_hit += cached;
    r->cached_tokens = std::min(cached, static_cast<int>(r->prompt.size()));
    waiting_.pop_front();
    r->state = Request::State::Running;
    running_.push_back(r);
    out.seqs.push_back({r, n});
    budget -= n;
  }
  return out;
}

}  // namespace megaops
