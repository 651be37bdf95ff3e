// See block_manager.h.
#include "engine/block_manager.h"

#include <string>

#include "core/error.h"

namespace megaops {

BlockManager::BlockManager(int num_blocks, int block_size)
    : num_blocks_(num_blocks), block_size_(block_size), in_use_(num_blocks > 0 ? num_blocks : 0) {
  if (num_blocks < 1 || block_size < 1)
    throw InputError("KV cache: expected num_blocks and block_size >= 1, found " +
                     std::to_string(num_blocks) + " and " + std::to_string(block_size));
  for (int32_t b = 0; b < num_blocks; ++b) free_.push_back(b);
}

int BlockManager::blocks_for(int64_t positions) const {
  return static_cast<int>((positions + block_size_ - 1) / block_size_);
}

bool BlockManager::grow(std::vector<int32_t>& table, int64_t positions) {
  const int64_t need = blocks_for(positions) - static_cast<int64_t>(table.size());
  if (need <= 0) return true;
  if (need > static_cast<int64_t>(free_.size())) return false;
  for (int64_t i = 0; i < need; ++i) {
    const int32_t b = free_.front();
    free_.pop_front();
    in_use_[b] = true;
    table.push_back(b);
  }
  return true;
}

void BlockManager::release(std::vector<int32_t>& table) {
  for (int32_t b : table) {
    if (b < 0 || b >= num_blocks_ || !in_use_[b])
      throw Error("BlockManager: block " + std::to_string(b) + " released but not in use");
    in_use_[b] = false;
    free_.push_back(b);
  }
  table.clear();
}

}  // namespace megaops
