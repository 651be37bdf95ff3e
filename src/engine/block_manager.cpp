// See block_manager.h.
#include "engine/block_manager.h"

#include <string>

#include "core/error.h"

namespace megaops {

namespace {

// splitmix64's finaliser: a well-mixed 64-bit step.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

BlockManager::BlockManager(int num_blocks, int block_size, bool prefix_caching)
    : num_blocks_(num_blocks), block_size_(block_size), prefix_caching_(prefix_caching) {
  if (num_blocks < 1 || block_size < 1)
    throw InputError("KV cache: expected num_blocks and block_size >= 1, found " +
                     std::to_string(num_blocks) + " and " + std::to_string(block_size));
  free_pos_.resize(num_blocks);
  refs_.assign(num_blocks, 0);
  entries_.resize(num_blocks);
  for (int32_t b = 0; b < num_blocks; ++b) free_pos_[b] = free_.insert(free_.end(), b);
}

int BlockManager::blocks_for(int64_t positions) const {
  return static_cast<int>((positions + block_size_ - 1) / block_size_);
}

void BlockManager::take(int32_t b) {
  free_.erase(free_pos_[b]);
  free_pos_[b] = free_.end();
  refs_[b] = 1;
}

bool BlockManager::grow(std::vector<int32_t>& table, int64_t positions) {
  const int64_t need = blocks_for(positions) - static_cast<int64_t>(table.size());
  if (need <= 0) return true;
  if (need > static_cast<int64_t>(free_.size())) return false;
  for (int64_t i = 0; i < need; ++i) {
    const int32_t b = free_.front();
    take(b);
    // Handed out to be written: whatever it cached is forgotten.
    Entry& e = entries_[b];
    if (e.registered) {
      cached_.erase(e.hash);
      e = Entry{};
    }
    table.push_back(b);
  }
  return true;
}

void BlockManager::release(std::vector<int32_t>& table, PrefixChain* chain) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) {
    const int32_t b = *it;
    if (b < 0 || b >= num_blocks_ || refs_[b] <= 0)
      throw Error("BlockManager: block " + std::to_string(b) + " released but not in use");
    if (--refs_[b] == 0) free_pos_[b] = free_.insert(free_.end(), b);
  }
  table.clear();
  if (chain) *chain = PrefixChain{};
}

uint64_t BlockManager::block_hash(uint64_t parent, const std::function<int(int)>& token_at,
                                  int first) const {
  uint64_t h = mix(parent ^ 0x6d656761u);
  for (int i = 0; i < block_size_; ++i) h = mix(h ^ static_cast<uint32_t>(token_at(first + i)));
  return h;
}

bool BlockManager::holds(const Entry& e, uint64_t parent, const std::function<int(int)>& token_at,
                         int first) const {
  if (!e.registered || e.parent != parent) return false;
  for (int i = 0; i < block_size_; ++i)
    if (e.tokens[i] != token_at(first + i)) return false;
  return true;
}

int BlockManager::match_prefix(const std::function<int(int)>& token_at, int limit,
                               std::vector<int32_t>& table, PrefixChain& chain) {
  if (!table.empty()) throw Error("BlockManager::match_prefix: the table is not empty");
  chain = PrefixChain{};
  if (!prefix_caching_) return 0;
  for (int first = 0; first + block_size_ <= limit; first += block_size_) {
    const uint64_t h = block_hash(chain.hash, token_at, first);
    const auto it = cached_.find(h);
    if (it == cached_.end() || !holds(entries_[it->second], chain.hash, token_at, first)) break;
    const int32_t b = it->second;
    if (refs_[b] == 0)
      take(b);
    else
      ++refs_[b];
    table.push_back(b);
    chain.hash = h;
    ++chain.blocks;
  }
  return chain.blocks * block_size_;
}

void BlockManager::register_full(const std::function<int(int)>& token_at, int computed,
                                 const std::vector<int32_t>& table, PrefixChain& chain) {
  if (!prefix_caching_) return;
  const int full = std::min<int>(computed / block_size_, static_cast<int>(table.size()));
  for (; chain.blocks < full; ++chain.blocks) {
    const int first = chain.blocks * block_size_;
    const uint64_t h = block_hash(chain.hash, token_at, first);
    const int32_t b = table[chain.blocks];
    Entry& e = entries_[b];
    // The same prefix may already be cached in another block (two requests computed it at
    // once, or a hash collision): the first registration stays; this block is not cached.
    if (!e.registered && !cached_.count(h)) {
      e.registered = true;
      e.hash = h;
      e.parent = chain.hash;
      e.tokens.resize(block_size_);
      for (int i = 0; i < block_size_; ++i) e.tokens[i] = token_at(first + i);
      cached_.emplace(h, b);
    }
    chain.hash = h;
  }
}

}  // namespace megaops
