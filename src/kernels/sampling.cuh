// Next-token selection for each row of fp32 logits: greedy (temperature <= 0) or sampled with
// temperature, top-k and top-p, exactly as ref::sample defines it, with the uniform number from
// ref::sampling_uniform's counter-based generator (seed, row, step), the step read from device
// memory so a replayed graph draws fresh numbers. Sampled mode needs step and top_p > 0. A row
// whose logits hold NaN or Inf gets NONFINITE_LOGITS_TOKEN (core/tokens.h), not a token.
// Parameters are the launch's (every row alike) or each row's own (SampleParams::rows: a serving
// step's rows belong to requests with their own parameters and random streams).
#pragma once

#include "kernels/common.cuh"
#include "kernels/greedy_key.cuh"
#include "kernels/tile_sync.cuh"

namespace megaops {

// One row's sampling parameters and random stream (SampleParams::rows), as the host fills them
// into device memory each step: temperature <= 0 is greedy; top_k <= 0 and top_p >= 1 are off;
// top_p must be > 0. The row draws counter_uniform(seed, rng_row, step) (ref::sampling_uniform):
// a request's seed, stream 0 and its generated-token index give it the same numbers in any batch.
struct SampleRow {
  uint64_t seed = 0;
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  uint32_t step = 0;
  uint32_t rng_row = 0;
  uint32_t reserved = 0;  // keeps the struct 32 bytes
};
static_assert(sizeof(SampleRow) == 32, "SampleRow is copied from host memory as is");

struct SampleParams {
  const float* logits = nullptr;  // [b, vocab], row stride ld
  int64_t ld = 0;
  int b = 0, vocab = 0;
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  const uint32_t* step = nullptr;  // device scalar
  int32_t* tokens = nullptr;       // [b]
  // Row r draws its uniform as row rng_rows[r] (device, [b]; null: as row r), so rows that belong
  // to one sequence in another layout draw that sequence's numbers.
  const int32_t* rng_rows = nullptr;
  // Per-row parameters (device, [b]): set, every row takes its own (temperature, top_k, top_p,
  // seed, step and stream from rows[r]) and the launch's temperature, top_k, top_p, seed, step and
  // rng_rows are not read. Null: every row takes the launch's (the behaviour before rows).
  const SampleRow* rows = nullptr;
  // Greedy only: each row's argmax already taken by the LM head's epilogue (MatmulParams::
  // argmax_out, packed as kernels/greedy_key.cuh says), [b], device. The sampler then reads no
  // logits: one CTA of one warp writes each row's token from its pack and zeroes the pack for the
  // next LM head. Null: the argmax over the logits, one CTA a row. With temperature > 0:
  // cudaErrorInvalidValue. With `rows`, the greedy rows take their token from the pack and the
  // others sample the logits; every row's pack is zeroed.
  unsigned long long* argmax = nullptr;
  TileSync sync;  // overlap hooks (kernels/tile_sync.cuh); one CTA per row, one signal per CTA
  LaunchOptions launch;
};

cudaError_t launch_sample(const SampleParams& p);
// The launch launch_sample(p) makes (grid = b, or 1 with p.argmax; not cappable) and its occupancy.
cudaError_t sample_footprint(const SampleParams& p, KernelFootprint* out);
cudaError_t preload_sampling_kernels();

}  // namespace megaops
