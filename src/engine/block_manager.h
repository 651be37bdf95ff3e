// The paged KV cache's allocator: which of the runner's num_blocks blocks each request holds.
// A request grows its block list as its context grows (vLLM's on-demand allocation), so the pool
// is shared by what requests actually use, not what they might; blocks come back when a request
// finishes, is aborted, fails or is preempted.
//
// Prefix caching (vLLM's automatic prefix caching, on unless turned off): a block whose positions
// are all computed is registered under a hash of its tokens and of every token before it
// (register_full). A later request whose tokens start the same way takes those blocks into its
// own table (match_prefix, counted by reference) and computes only what follows. A released block
// keeps its contents and registration while it waits in the free list; it is forgotten only when
// it is handed out again, least recently released first, so the pool never holds less than it
// would without the cache. Registered blocks are full and never written again, so requests share
// them read-only. A block's registration keeps its tokens and its predecessor's hash, so a hash
// collision is a miss, never another prefix's K/V.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <unordered_map>
#include <vector>

namespace megaops {

// Where a request's table stands in the cache: how many of its leading blocks are registered (or
// were matched) and the hash of the last of them (the chain the next block's hash extends).
struct PrefixChain {
  int blocks = 0;
  uint64_t hash = 0;
};

class BlockManager {
 public:
  BlockManager(int num_blocks, int block_size, bool prefix_caching = true);

  int block_size() const { return block_size_; }
  int num_blocks() const { return num_blocks_; }
  // Blocks no request holds (cached ones waiting in the free list included).
  int num_free() const { return static_cast<int>(free_.size()); }
  int num_used() const { return num_blocks_ - num_free(); }
  int num_cached() const { return static_cast<int>(cached_.size()); }
  bool prefix_caching() const { return prefix_caching_; }
  // Blocks that hold `positions` positions.
  int blocks_for(int64_t positions) const;

  // Grows `table` to cover `positions` positions. False (and `table` unchanged) when the free
  // list is short.
  bool grow(std::vector<int32_t>& table, int64_t positions);
  // Returns every block of `table` to the free list (the last first, so a sequence's tail is
  // forgotten before its head) and empties it; `chain` (if given) is reset.
  void release(std::vector<int32_t>& table, PrefixChain* chain = nullptr);

  // Prefix caching: with `table` empty, takes the registered blocks that hold the longest run of
  // whole blocks of tokens [0, limit) (token_at(i) is token i) into `table` and sets `chain`;
  // returns the positions they hold (0 with prefix caching off).
  int match_prefix(const std::function<int(int)>& token_at, int limit, std::vector<int32_t>& table,
                   PrefixChain& chain);
  // Registers the blocks of `table` that positions [0, computed) now fill, past chain.blocks.
  void register_full(const std::function<int(int)>& token_at, int computed,
                     const std::vector<int32_t>& table, PrefixChain& chain);

 private:
  struct Entry {
    bool registered = false;
    uint64_t hash = 0, parent = 0;
    std::vector<int> tokens;
  };
  uint64_t block_hash(uint64_t parent, const std::function<int(int)>& token_at, int first) const;
  bool holds(const Entry& e, uint64_t parent, const std::function<int(int)>& token_at,
             int first) const;
  void take(int32_t b);  // from the free list into a table

  int num_blocks_, block_size_;
  bool prefix_caching_;
  std::list<int32_t> free_;  // least recently released first
  std::vector<std::list<int32_t>::iterator> free_pos_;
  std::vector<int> refs_;  // tables holding each block; a block in free_ has 0
  std::vector<Entry> entries_;
  std::unordered_map<uint64_t, int32_t> cached_;  // hash -> registered block
};

}  // namespace megaops
