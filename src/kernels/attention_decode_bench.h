// Standalone timing of decode attention through block tables against the contiguous cache
// (`megaops bench-attention --paged BLOCK_SIZE`): `batch` sequences of `context` keys each, the
// executor's launch (launch_decode_attention, merged in the kernel), over enough layers' caches
// that the reads come from HBM, not L2; the paged cache's blocks are the same bytes in a shuffled
// order: scattered over the whole cache (shuffled, a long-running server's free list), in each
// sequence's order (sequential), or sequences' blocks taking turns (interleaved: sequences that
// grew together from an empty pool). Pure C++ header (the CLI is compiled without CUDA headers).
#pragma once

namespace megaops {

enum class PagedOrder { Shuffled, Sequential, Interleaved };

struct DecodePagedBenchCase {
  int batch = 1, context = 1024;
  int num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int block_size = 16;
  PagedOrder order = PagedOrder::Shuffled;
  int repeats = 9;  // timed graph replays a layout (median)
};

struct DecodePagedBenchResult {
  int layers = 0;            // caches cycled through (each launch reads the next one)
  int launches = 0;          // launches a timed graph replay
  double kv_bytes = 0;       // K and V bytes one launch reads
  double contiguous_us = 0;  // one launch, median over the repeats
  double contiguous_min_us = 0, contiguous_max_us = 0;
  double paged_us = 0;
  double paged_min_us = 0, paged_max_us = 0;
};

// Throws InputError on a bad case, DeviceError when a launch fails or memory runs out.
DecodePagedBenchResult time_decode_attention_paged(const DecodePagedBenchCase& c);

}  // namespace megaops
