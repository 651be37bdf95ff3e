// The paged KV cache's allocator: which of the runner's num_blocks blocks each request holds.
// Blocks are handed out from a FIFO free list and come back when a request finishes, is aborted,
// fails or is preempted; a request grows its block list as its context grows (vLLM's on-demand
// allocation), so the pool is shared by what requests actually use, not what they might.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

namespace megaops {

class BlockManager {
 public:
  BlockManager(int num_blocks, int block_size);

  int block_size() const { return block_size_; }
  int num_blocks() const { return num_blocks_; }
  int num_free() const { return static_cast<int>(free_.size()); }
  int num_used() const { return num_blocks_ - num_free(); }
  // Blocks that hold `positions` positions.
  int blocks_for(int64_t positions) const;

  // Grows `table` to cover `positions` positions. False (and `table` unchanged) when the free
  // list is short.
  bool grow(std::vector<int32_t>& table, int64_t positions);
  // Returns every block of `table` to the free list and empties it.
  void release(std::vector<int32_t>& table);

 private:
  int num_blocks_, block_size_;
  std::deque<int32_t> free_;
  std::vector<bool> in_use_;  // guards against a block freed twice (a bug, thrown as Error)
};

}  // namespace megaops
