// The paged KV cache in tests (kernels/kv_pages.cuh): a random paging of a contiguous cache
// [slots, max_seq, row] — every slot's blocks scattered over a larger pool, shuffled, no block
// shared between slots, the pool's other blocks poisoned (NaN bits) — and the copies between the
// two layouts. A kernel run on the paged copy must give the contiguous run's bits: the same values
// enter the same arithmetic; only the addresses differ.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/kv_pages.cuh"

namespace megaops::testing {

struct RandomPaging {
  int slots = 0, max_seq = 0, block_size = 0;
  int stride = 0;              // table entries a slot: ceil(max_seq / block_size)
  int num_blocks = 0;          // the pool: every slot's blocks and `spare` more
  std::vector<int32_t> table;  // [slots, stride]

  RandomPaging(int slots_, int max_seq_, int block_size_, int spare, std::mt19937_64& rng)
      : slots(slots_), max_seq(max_seq_), block_size(block_size_) {
    stride = (max_seq + block_size - 1) / block_size;
    num_blocks = slots * stride + spare;
    std::vector<int32_t> pool(num_blocks);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    table.assign(pool.begin(), pool.begin() + static_cast<size_t>(slots) * stride);
  }

  std::string describe() const {
    return "paged: block_size " + std::to_string(block_size) + ", " + std::to_string(num_blocks) +
           " blocks";
  }

  // Element offset of (slot, pos)'s row in the paged cache of `row` elements a position.
  size_t paged_at(int slot, int pos, size_t row) const {
    const size_t block =
        static_cast<size_t>(table[static_cast<size_t>(slot) * stride + pos / block_size]);
    return (block * block_size + pos % block_size) * row;
  }

  // The paged copy of a contiguous cache [slots, max_seq, row]; rows no slot maps: poison.
  template <typename T>
  std::vector<T> to_paged(const std::vector<T>& contiguous, size_t row, T poison) const {
    std::vector<T> out(static_cast<size_t>(num_blocks) * block_size * row, poison);
    for (int s = 0; s < slots; ++s)
      for (int p = 0; p < max_seq; ++p) {
        const size_t from = (static_cast<size_t>(s) * max_seq + p) * row;
        std::copy(contiguous.begin() + from, contiguous.begin() + from + row,
                  out.begin() + paged_at(s, p, row));
      }
    return out;
  }

  // The contiguous view of a paged cache (what each slot's positions hold).
  template <typename T>
  std::vector<T> to_contiguous(const std::vector<T>& paged, size_t row) const {
    std::vector<T> out(static_cast<size_t>(slots) * max_seq * row);
    for (int s = 0; s < slots; ++s)
      for (int p = 0; p < max_seq; ++p) {
        const size_t at = paged_at(s, p, row);
        std::copy(paged.begin() + at, paged.begin() + at + row,
                  out.begin() + (static_cast<size_t>(s) * max_seq + p) * row);
      }
    return out;
  }

  // Whether every row of the pool that no slot maps (the spare blocks, and the tail of a last
  // block past max_seq) still holds `poison`: nothing wrote outside the table.
  template <typename T>
  bool unmapped_untouched(const std::vector<T>& paged, size_t row, T poison) const {
    std::vector<bool> mapped(static_cast<size_t>(num_blocks) * block_size, false);
    for (int s = 0; s < slots; ++s)
      for (int p = 0; p < max_seq; ++p) mapped[paged_at(s, p, row) / row] = true;
    for (size_t r = 0; r < mapped.size(); ++r)
      if (!mapped[r])
        for (size_t j = 0; j < row; ++j)
          if (paged[r * row + j] != poison) return false;
    return true;
  }

  // The table rows of `slot`, as a sequence's block table.
  const int32_t* slot_table(int slot) const {
    return table.data() + static_cast<size_t>(slot) * stride;
  }

  // The paging the kernels take, over a device copy of `table`.
  KvPages pages(const int32_t* device_table) const {
    return kv_pages(device_table, block_size, stride);
  }
};

}  // namespace megaops::testing
