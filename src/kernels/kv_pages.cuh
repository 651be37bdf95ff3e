// Where a sequence's cached keys and values live: the one addressing rule every kernel that reads
// or writes the KV cache (qkv_rope, decode and prefill attention, the rope fold) goes through.
//
// A cache is an array of rows, one row per cached position: [rows, num_kv_heads, head_dim] bf16,
// all kv heads of a position side by side (so a kv head's row is one 16-byte-aligned run of
// head_dim values, and qkv_rope writes a position's heads into one place). Which row holds
// position `pos` of the sequence at slot `slot`:
//   contiguous (block_table null): row slot * max_seq + pos, the cache [max_batch, max_seq, ...];
//   paged: the cache is num_blocks blocks of block_size rows ([num_blocks, block_size, ...]) and
//     `slot` is a row of the block table [rows, table_stride]; position pos lives in block
//     table[slot * table_stride + pos / block_size], at row pos % block_size of that block.
// The contiguous cache is the paged one whose block table is the identity over each slot's
// blocks (table[s][j] = s * (max_seq / block_size) + j where block_size divides max_seq): the
// same row for every position, so the two layouts read and write the same bytes. Kernels take
// the contiguous rule without loading anything when block_table is null.
//
// block_size is a power of two (position -> block is a shift, block offset a mask: the decode
// kernels map every key they read), table_stride covers max_seq positions, and a paged cache
// (one layer's K or V) is smaller than 4 GiB: the warp-parallel decode kernel addresses its rows
// with 32-bit byte offsets from a CTA-uniform base. Block ids are not
// checked on the device: the owner of the table (the paged runner, from the engine's block
// manager) validates them on the host. The table is a step input: written before a step's
// kernels (a copy at the head of the step's graph) and only read by them, with ordinary loads.
#pragma once

#include <cstdint>

#include "kernels/common.cuh"

namespace megaops {

struct KvPages {
  const int32_t* block_table = nullptr;  // [rows, table_stride]; null: the contiguous cache
  int block_shift = 0;                   // log2(block_size)
  int table_stride = 0;                  // entries per table row

  __host__ __device__ bool paged() const { return block_table != nullptr; }
  __host__ __device__ int block_size() const { return 1 << block_shift; }
};

// Whether block_size is one the paged cache takes: a power of two in [1, 2^20].
inline bool kv_block_size_ok(int block_size) {
  return block_size >= 1 && block_size <= (1 << 20) && (block_size & (block_size - 1)) == 0;
}

// The paging of block_size-position blocks through `table` ([rows, table_stride], device).
// block_size must satisfy kv_block_size_ok (else the rows are those of the next power of two).
inline KvPages kv_pages(const int32_t* table, int block_size, int table_stride) {
  KvPages kv;
  kv.block_table = table;
  kv.table_stride = table_stride;
  while (kv.block_shift < 30 && (1 << kv.block_shift) < block_size) ++kv.block_shift;
  return kv;
}

// Whether kv can address positions [0, max_seq): contiguous, or a power-of-two block size and a
// table row long enough for max_seq positions.
inline bool kv_pages_valid(const KvPages& kv, int max_seq) {
  if (!kv.paged()) return true;
  if (kv.block_shift < 0 || kv.block_shift > 20 || kv.table_stride <= 0 || max_seq <= 0)
    return false;
  const int64_t blocks = (static_cast<int64_t>(max_seq) + kv.block_size() - 1) >> kv.block_shift;
  return blocks <= kv.table_stride;
}

#if defined(__CUDACC__)
// The cache row of position pos (0 <= pos < max_seq) of the sequence at slot.
__device__ __forceinline__ int64_t kv_row(const KvPages& kv, int64_t slot, int pos, int max_seq) {
  if (!kv.paged()) return slot * max_seq + pos;
  const int32_t block = kv.block_table[slot * kv.table_stride + (pos >> kv.block_shift)];
  return (static_cast<int64_t>(block) << kv.block_shift) + (pos & (kv.block_size() - 1));
}

// One sequence's table row, resolved once per CTA: the rows of its positions without the slot
// multiplication. PAGED false is the contiguous rule (row0 = slot * max_seq).
template <bool PAGED>
struct KvSeqRows {
  const int32_t* table = nullptr;  // PAGED: the slot's table row
  int64_t row0 = 0;                // contiguous: the slot's first row
  int shift = 0, mask = 0;

  __device__ __forceinline__ KvSeqRows(const KvPages& kv, int64_t slot, int max_seq) {
    if constexpr (PAGED) {
      table = kv.block_table + slot * kv.table_stride;
      shift = kv.block_shift;
      mask = kv.block_size() - 1;
    } else {
      row0 = slot * max_seq;
    }
  }
  // The block of position pos (PAGED only): one load, which callers issue a round ahead.
  __device__ __forceinline__ int32_t block_of(int pos) const { return table[pos >> shift]; }
  // The row of position pos, its block already loaded (PAGED) or not needed.
  __device__ __forceinline__ int64_t row_in(int32_t block, int pos) const {
    if constexpr (PAGED)
      return (static_cast<int64_t>(block) << shift) + (pos & mask);
    else
      return row0 + pos;
  }
  // row_in in 32 bits: for caches of fewer than 2^32 bytes a layer (paged: KvPages).
  __device__ __forceinline__ uint32_t row_in32(int32_t block, int pos) const {
    return (static_cast<uint32_t>(block) << shift) + static_cast<uint32_t>(pos & mask);
  }
  __device__ __forceinline__ int64_t row(int pos) const {
    if constexpr (PAGED)
      return row_in(block_of(pos), pos);
    else
      return row0 + pos;
  }
};
#endif

}  // namespace megaops
