// Tests of the tile semaphores (sync/tile_semaphore.cuh) and the watchdog (sync/error_record.h):
// a producer and its consumers on separate streams, randomised over tilings, grids, injected delays
// and launch order (consumer first must not deadlock); one step captured into a CUDA graph and
// replayed 10,000 times on monotonic counters; a lost signal that must trap and be named by the
// host. Every value a producer writes depends on (seed, step, element), so a consumer that reads
// too early or reads a stale copy sees a different number, and outputs are compared exactly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <numeric>
#include <string>
#include <vector>

#include "core/cuda_owners.h"
#include "gpu_test_util.h"
#include "sync/error_record.h"
#include "sync/tile_semaphore.cuh"

namespace megaops {
namespace {

using testing::DeviceBuffer;

constexpr int THREADS = 128;

// ---- values and the transforms consumers apply (shared by kernels and the host oracle) ----

__host__ __device__ inline uint32_t test_mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return static_cast<uint32_t>(x ^ (x >> 31));
}

// What the producer writes at element e of the intermediate tensor in step `step`.
__host__ __device__ inline uint32_t tile_value(uint64_t seed, uint32_t step, uint32_t e) {
  return test_mix(seed ^ ((static_cast<uint64_t>(step) << 32) | e));
}

// The copy consumer's output element.
__host__ __device__ inline uint32_t copy_transform(uint32_t v, uint32_t e) {
  return v * 2654435761u + e;
}

// One term of the GEMV-like consumer's per-(row, tile) sum (uint32, wrapping: exact, any order).
__host__ __device__ inline uint32_t gemv_term(uint32_t v, uint32_t row) {
  return (v ^ (row * 0x9e3779b9u)) * (2 * row + 1);
}

// ---- kernels ----

struct ProducerArgs {
  uint32_t* mid;             // [num_tiles * tile_elems]
  uint32_t* counters;        // [num_tiles]
  const int* order;          // permutation of the num_tiles * parts work items
  const uint32_t* step_ptr;  // step from device memory when set, else `step`
  uint32_t step;
  bool rotate_by_step;  // start the order at a step-dependent offset
  int num_tiles;
  int tile_elems;
  int parts;  // producer work items (and signals) per tile
  uint64_t value_seed;
  DelayParams delay;
};

// Writes work items (a part of a tile each) in the given order, grid-strided, and signals each.
// With parts > 1 a tile is written by several CTAs and its counter gets `parts` signals per step.
__global__ void producer_kernel(ProducerArgs a) {
  const uint32_t step = a.step_ptr ? *a.step_ptr : a.step;
  const int items = a.num_tiles * a.parts;
  const int rot = a.rotate_by_step ? static_cast<int>(test_mix(step) % items) : 0;
  for (int i = blockIdx.x; i < items; i += gridDim.x) {
    const int item = a.order[(i + rot) % items];
    const int tile = item / a.parts;
    const int part = item % a.parts;
    const uint64_t site = (static_cast<uint64_t>(step) << 32) | static_cast<uint32_t>(item);
    random_delay(a.delay, 2 * site);
    const int base = tile * a.tile_elems;
    const int begin = base + part * a.tile_elems / a.parts;
    const int end = base + (part + 1) * a.tile_elems / a.parts;
    // The part is written in two halves with a delay between them, so a consumer that reads
    // before the signal, or a signal issued before the last write, sees a half-written tile.
    const int mid_point = begin + (end - begin) / 2;
    for (int e = begin + threadIdx.x; e < mid_point; e += blockDim.x)
      a.mid[e] = tile_value(a.value_seed, step, static_cast<uint32_t>(e));
    random_delay(a.delay, 2 * site + 1);
    for (int e = mid_point + threadIdx.x; e < end; e += blockDim.x)
      a.mid[e] = tile_value(a.value_seed, step, static_cast<uint32_t>(e));
    maybe_delay(a.value_seed, site);
    tile_signal_cta(&a.counters[tile]);
  }
}

struct ConsumerArgs {
  const uint32_t* mid;  // read with ordinary loads only (see tile_semaphore.cuh)
  uint32_t* out;
  const uint32_t* counters;
  const uint32_t* step_ptr;  // target = tile_target(*step_ptr, parts) when set, else `target`
  uint32_t target;
  int num_tiles;
  int tile_elems;
  int parts;
  int rows;      // GEMV consumer only
  int rotation;  // first tile of CTA 0's order
  uint32_t op;
  WatchdogParams wd;
};

__device__ inline uint32_t consumer_target(const ConsumerArgs& a) {
  return a.step_ptr ? tile_target(*a.step_ptr, a.parts) : a.target;
}

// Each tile is read by one CTA, which copies it (transformed) to out.
__global__ void copy_consumer_kernel(ConsumerArgs a) {
  const uint32_t target = consumer_target(a);
  for (int i = blockIdx.x; i < a.num_tiles; i += gridDim.x) {
    const int tile = (i + a.rotation) % a.num_tiles;
    tile_wait_cta(&a.counters[tile], target, WaitSite{a.op, static_cast<uint32_t>(tile)}, a.wd);
    const int base = tile * a.tile_elems;
    for (int e = base + threadIdx.x; e < base + a.tile_elems; e += blockDim.x)
      a.out[e] = copy_transform(a.mid[e], static_cast<uint32_t>(e));
  }
}

// Every row reads every tile, like a GEMV over K chunks: each CTA folds tiles in its own order as
// they arrive and writes out[row * num_tiles + tile] = sum of gemv_term over the tile.
__global__ void gemv_consumer_kernel(ConsumerArgs a) {
  __shared__ uint32_t warp_sums[THREADS / 32];
  const uint32_t target = consumer_target(a);
  for (int row = blockIdx.x; row < a.rows; row += gridDim.x) {
    for (int j = 0; j < a.num_tiles; ++j) {
      const int tile = (j + row + a.rotation) % a.num_tiles;
      tile_wait_cta(&a.counters[tile], target, WaitSite{a.op, static_cast<uint32_t>(tile)}, a.wd);
      const int base = tile * a.tile_elems;
      uint32_t sum = 0;
      for (int e = base + threadIdx.x; e < base + a.tile_elems; e += blockDim.x)
        sum += gemv_term(a.mid[e], static_cast<uint32_t>(row));
      for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
      __syncthreads();
      if (threadIdx.x == 0) {
        uint32_t total = 0;
        for (int w = 0; w < THREADS / 32; ++w) total += warp_sums[w];
        a.out[static_cast<size_t>(row) * a.num_tiles + tile] = total;
      }
      // The next tile_wait_cta's barrier keeps warp_sums from being overwritten before thread 0
      // has read it.
    }
  }
}

__global__ void advance_step_kernel(uint32_t* step) {
  *step += 1;
}

// ---- host helpers ----

// Rule 1 of DESIGN.md: load every kernel before a waiting kernel can run, so a producer never
// needs a lazy module load while its consumer spins (that deadlocked on the H200 here).
void preload_kernels() {
  cudaFuncAttributes attr;
  MEGAOPS_CUDA_CHECK(cudaFuncGetAttributes(&attr, producer_kernel));
  MEGAOPS_CUDA_CHECK(cudaFuncGetAttributes(&attr, copy_consumer_kernel));
  MEGAOPS_CUDA_CHECK(cudaFuncGetAttributes(&attr, gemv_consumer_kernel));
  MEGAOPS_CUDA_CHECK(cudaFuncGetAttributes(&attr, advance_step_kernel));
}

// Rule 2 of DESIGN.md: every kernel that can be live at the same time as a waiting kernel must be
// resident with it, or the waiter can hold the SMs its producer needs. No API orders CTAs of
// independent kernels, so we size grids instead: a kernel gets at most `share` of the CTAs that
// fit on the whole GPU by the occupancy API. With shares summing to at most 1/2 over the kernels
// that co-run, each CTA uses at most 1/occupancy of every SM resource, so any placement the block
// scheduler makes leaves room for all of them (a CTA that did not fit would need every SM more
// than half full).
int resident_budget(const void* kernel, int threads, double share) {
  int device = 0;
  int sms = 0;
  int per_sm = 0;
  MEGAOPS_CUDA_CHECK(cudaGetDevice(&device));
  MEGAOPS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  MEGAOPS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
  return std::max(1, static_cast<int>(share * sms * per_sm));
}

std::vector<uint32_t> expected_copy(uint64_t seed, uint32_t step, int num_tiles, int tile_elems) {
  std::vector<uint32_t> out(static_cast<size_t>(num_tiles) * tile_elems);
  for (size_t e = 0; e < out.size(); ++e)
    out[e] =
        copy_transform(tile_value(seed, step, static_cast<uint32_t>(e)), static_cast<uint32_t>(e));
  return out;
}

std::vector<uint32_t> expected_gemv(uint64_t seed, uint32_t step, int num_tiles, int tile_elems,
                                    int rows) {
  std::vector<uint32_t> values(static_cast<size_t>(num_tiles) * tile_elems);
  for (size_t e = 0; e < values.size(); ++e)
    values[e] = tile_value(seed, step, static_cast<uint32_t>(e));
  std::vector<uint32_t> out(static_cast<size_t>(rows) * num_tiles, 0);
  for (int r = 0; r < rows; ++r)
    for (int t = 0; t < num_tiles; ++t) {
      uint32_t sum = 0;
      for (int i = 0; i < tile_elems; ++i)
        sum += gemv_term(values[static_cast<size_t>(t) * tile_elems + i], static_cast<uint32_t>(r));
      out[static_cast<size_t>(r) * num_tiles + t] = sum;
    }
  return out;
}

// Index of the first difference, or -1.
long first_mismatch(const std::vector<uint32_t>& got, const std::vector<uint32_t>& want) {
  for (size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i]) return static_cast<long>(i);
  return -1;
}

const std::vector<std::string> OP_NAMES = {"consumer_copy", "consumer_gemv", "lost_signal_test"};
constexpr uint32_t OP_COPY = 0;
constexpr uint32_t OP_GEMV = 1;
constexpr uint32_t OP_LOST = 2;

// ---- tests ----

TEST(TileSemaphore, WrapSafeCountComparison) {
  EXPECT_TRUE(tile_count_reached(5, 5));
  EXPECT_TRUE(tile_count_reached(6, 5));
  EXPECT_FALSE(tile_count_reached(4, 5));
  EXPECT_TRUE(tile_count_reached(2u, 0xfffffffeu));   // counter wrapped past the target
  EXPECT_FALSE(tile_count_reached(0xfffffffeu, 2u));  // target wrapped, counter not yet
  EXPECT_TRUE(tile_count_reached(0x7fffffffu, 0u));   // furthest ahead still "reached"
  EXPECT_FALSE(tile_count_reached(0x80000000u, 0u));  // 2^31 ahead reads as behind
  EXPECT_EQ(tile_target(3, 4), 12u);
  EXPECT_EQ(tile_target(0x80000000u, 2), 0u);  // targets wrap like counters
}

TEST(TileSemaphore, RandomDelayIsBoundedAndVaries) {
  const DelayParams d{20000, testing::test_seed()};
  uint32_t lo = UINT32_MAX, hi = 0;
  for (uint64_t site = 0; site < 4096; ++site) {
    const uint32_t ns = random_delay_ns(d, site);
    lo = std::min(lo, ns);
    hi = std::max(hi, ns);
  }
  EXPECT_LE(hi, 20000u);
  EXPECT_LT(lo, 1000u);  // 4096 uniform draws: both ends are reached with near certainty
  EXPECT_GT(hi, 19000u);
  EXPECT_EQ(random_delay_ns(DelayParams{}, 123), 0u);
}

// The settings' command-line spellings (sync/error_record.h): each of `valid` parses to itself,
// each of `bad` throws InputError naming the option.
template <typename T>
void expect_setting(T (*parse)(const std::string&, const std::string&),
                    std::initializer_list<T> valid, std::initializer_list<const char*> bad) {
  for (T v : valid) EXPECT_EQ(parse(std::to_string(v), "--opt"), v);
  for (const char* b : bad) {
    try {
      parse(b, "--opt");
      ADD_FAILURE() << "'" << b << "' was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("--opt"), std::string::npos) << e.what();
    }
  }
}

TEST(TileSemaphore, WatchdogTimeoutSetting) {
  expect_setting<uint64_t>(parse_watchdog_ms, {250, 0, DEFAULT_WATCHDOG_MS},
                           {"-1", "2s", " 5", "x", ""});
}

TEST(TileSemaphore, WaitSleepCapSetting) {
  expect_setting<uint32_t>(parse_wait_sleep_max_ns, {0, 256, 1000000},
                           {"-1", "1000001", "64ns", ""});
}

TEST(TileSemaphore, WatchdogRecordStartsClear) {
  MEGAOPS_REQUIRE_GPU();
  WatchdogRecord wd(1234);
  EXPECT_FALSE(wd.tripped());
  EXPECT_EQ(wd.describe(OP_NAMES), "");
  EXPECT_NO_THROW(wd.throw_if_tripped(OP_NAMES));
  EXPECT_NO_THROW(wd.check(cudaSuccess, OP_NAMES));
  EXPECT_THROW(wd.check(cudaErrorInvalidValue, OP_NAMES), DeviceError);
  EXPECT_EQ(wd.params().timeout_ns, 1234000000u);
  EXPECT_NE(wd.params().record, nullptr);
  EXPECT_NE(wd.params().claim, nullptr);
  EXPECT_EQ(WatchdogRecord(0).params().timeout_ns, 0u);  // 0 = no watchdog
  EXPECT_EQ(wd.params().sleep_max_ns, DEFAULT_WAIT_SLEEP_MAX_NS);
  EXPECT_EQ(WatchdogRecord(0, 0).params().sleep_max_ns, 0u);  // spin
}

// Producer and consumer on two streams, >= 1000 randomised trials: tilings with awkward sizes,
// 1-3 producer CTAs per tile, grids from 1 CTA to the residency budget, delays up to 20 us
// between and around the writes, counters starting anywhere (also just below 2^32 so targets
// wrap), a copy consumer (one reader per tile) or a GEMV-like one (every row reads every tile),
// and alternately producer-first and consumer-first launch order.
TEST(TileSemaphore, ProducerConsumerRandomized) {
  MEGAOPS_REQUIRE_GPU();
  preload_kernels();
  const uint64_t seed = testing::test_seed();
  std::mt19937_64 rng(seed);
  WatchdogRecord wd;  // a hang fails the test with op and tile instead of stalling CI

  constexpr int TRIALS = 1200;
  constexpr int MAX_TILES = 160;
  constexpr int MAX_ELEMS = 700;
  constexpr int MAX_PARTS = 3;
  constexpr int MAX_ROWS = 24;
  // Two kernels co-run: 1/4 of the GPU each (see resident_budget).
  const int producer_budget = resident_budget((const void*)producer_kernel, THREADS, 0.25);
  const int copy_budget = resident_budget((const void*)copy_consumer_kernel, THREADS, 0.25);
  const int gemv_budget = resident_budget((const void*)gemv_consumer_kernel, THREADS, 0.25);

  DeviceBuffer<uint32_t> mid(static_cast<size_t>(MAX_TILES) * MAX_ELEMS);
  DeviceBuffer<uint32_t> out(static_cast<size_t>(MAX_TILES) * std::max(MAX_ELEMS, MAX_ROWS));
  DeviceBuffer<uint32_t> counters(MAX_TILES);
  DeviceBuffer<int> order(static_cast<size_t>(MAX_TILES) * MAX_PARTS);
  CudaStream producer_stream, consumer_stream;

  // Log-uniform in [1, hi]: small grids and tile counts (most contention per CTA) come up often.
  auto log_uniform = [&](int hi) {
    std::uniform_real_distribution<double> u(0.0, std::log(hi + 1.0));
    return std::clamp(static_cast<int>(std::exp(u(rng))), 1, hi);
  };
  const uint32_t delays[] = {0, 300, 2000, 20000};

  for (int trial = 0; trial < TRIALS; ++trial) {
    const int num_tiles = log_uniform(MAX_TILES);
    const int tile_elems = log_uniform(MAX_ELEMS);
    const int parts = 1 + static_cast<int>(rng() % MAX_PARTS);
    const bool gemv = rng() % 3 == 0;
    const int rows = gemv ? log_uniform(MAX_ROWS) : 0;
    const bool consumer_first = trial % 2 == 1;
    const int items = num_tiles * parts;
    const int producer_ctas = log_uniform(std::min(items, producer_budget));
    const int consumer_ctas = gemv ? log_uniform(std::min(rows, gemv_budget))
                                   : log_uniform(std::min(num_tiles, copy_budget));
    // Short delays for large trials keep the total runtime bounded: the slowest CTA serialises
    // about items / producer_ctas delays.
    const uint32_t max_delay = items / producer_ctas > 64 ? delays[rng() % 2] : delays[rng() % 4];
    const uint32_t base = trial % 8 == 7 ? 0xffffffffu - static_cast<uint32_t>(rng() % 4)
                                         : static_cast<uint32_t>(rng());
    const uint32_t step = static_cast<uint32_t>(trial + 1);
    const uint64_t value_seed = rng();

    std::vector<int> perm(items);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    order.upload(perm);
    std::vector<uint32_t> counts(MAX_TILES, base);
    counters.upload(counts);
    mid.poison();
    out.poison();
    MEGAOPS_CUDA_CHECK(cudaDeviceSynchronize());  // the streams are non-blocking

    ProducerArgs pa{};
    pa.mid = mid.ptr;
    pa.counters = counters.ptr;
    pa.order = order.ptr;
    pa.step = step;
    pa.num_tiles = num_tiles;
    pa.tile_elems = tile_elems;
    pa.parts = parts;
    pa.value_seed = value_seed;
    pa.delay = DelayParams{max_delay, value_seed ^ 0x5eed};
    ConsumerArgs ca{};
    ca.mid = mid.ptr;
    ca.out = out.ptr;
    ca.counters = counters.ptr;
    ca.target = base + static_cast<uint32_t>(parts);
    ca.num_tiles = num_tiles;
    ca.tile_elems = tile_elems;
    ca.parts = parts;
    ca.rows = rows;
    ca.rotation = static_cast<int>(rng() % num_tiles);
    ca.op = gemv ? OP_GEMV : OP_COPY;
    ca.wd = wd.params();
    // The back-off cap: pure spinning, short and the default (DEFAULT_WAIT_SLEEP_MAX_NS).
    constexpr uint32_t SLEEP_CAPS[] = {0, 64, DEFAULT_WAIT_SLEEP_MAX_NS};
    ca.wd.sleep_max_ns = SLEEP_CAPS[rng() % 3];

    auto launch_producer = [&] {
      producer_kernel<<<producer_ctas, THREADS, 0, producer_stream.s>>>(pa);
      return cudaGetLastError();
    };
    auto launch_consumer = [&] {
      if (gemv)
        gemv_consumer_kernel<<<consumer_ctas, THREADS, 0, consumer_stream.s>>>(ca);
      else
        copy_consumer_kernel<<<consumer_ctas, THREADS, 0, consumer_stream.s>>>(ca);
      return cudaGetLastError();
    };
    if (consumer_first) {
      ASSERT_EQ(launch_consumer(), cudaSuccess);
      ASSERT_EQ(launch_producer(), cudaSuccess);
    } else {
      ASSERT_EQ(launch_producer(), cudaSuccess);
      ASSERT_EQ(launch_consumer(), cudaSuccess);
    }
    wd.check(cudaDeviceSynchronize(), OP_NAMES);

    const std::string what =
        "trial " + std::to_string(trial) + ": tiles=" + std::to_string(num_tiles) +
        " elems=" + std::to_string(tile_elems) + " parts=" + std::to_string(parts) +
        (gemv ? " gemv rows=" + std::to_string(rows) : std::string(" copy")) +
        " producer_ctas=" + std::to_string(producer_ctas) +
        " consumer_ctas=" + std::to_string(consumer_ctas) +
        " max_delay_ns=" + std::to_string(max_delay) + " base=" + std::to_string(base) +
        (consumer_first ? " consumer-first" : " producer-first");
    const auto want = gemv ? expected_gemv(value_seed, step, num_tiles, tile_elems, rows)
                           : expected_copy(value_seed, step, num_tiles, tile_elems);
    auto got = out.download();
    got.resize(want.size());
    const long bad = first_mismatch(got, want);
    ASSERT_EQ(bad, -1) << what << ": first wrong output " << bad;
    const auto final_counts = counters.download();
    for (int t = 0; t < num_tiles; ++t)
      ASSERT_EQ(final_counts[t], base + static_cast<uint32_t>(parts)) << what << ": tile " << t;
  }
}

// One decode-like step captured into ONE CUDA graph: poison the outputs, advance the device step
// counter, then the producer and two consumers (copy and GEMV-like) on three streams forked and
// joined with events. Replayed 10,000 times on the same counters, never reset: the targets grow
// with the step read from device memory at kernel start (rule 3 of DESIGN.md).
TEST(TileSemaphore, GraphReplaysOnMonotonicCounters) {
  MEGAOPS_REQUIRE_GPU();
  preload_kernels();
  const uint64_t seed = testing::test_seed();
  WatchdogRecord wd;

  constexpr int TILES = 96;
  constexpr int ELEMS = 301;
  constexpr int PARTS = 2;
  constexpr int ROWS = 37;
  constexpr int REPLAYS = 10000;
  constexpr int CHECK_EVERY = 1000;
  // Three kernels co-run: 1/6 of the GPU each (see resident_budget).
  const int producer_ctas =
      std::min(resident_budget((const void*)producer_kernel, THREADS, 1.0 / 6), 61);
  const int copy_ctas =
      std::min(resident_budget((const void*)copy_consumer_kernel, THREADS, 1.0 / 6), 29);
  const int gemv_ctas =
      std::min(resident_budget((const void*)gemv_consumer_kernel, THREADS, 1.0 / 6), ROWS);

  DeviceBuffer<uint32_t> mid(static_cast<size_t>(TILES) * ELEMS);
  DeviceBuffer<uint32_t> out_copy(static_cast<size_t>(TILES) * ELEMS);
  DeviceBuffer<uint32_t> out_gemv(static_cast<size_t>(ROWS) * TILES);
  DeviceBuffer<uint32_t> counters(TILES);
  DeviceBuffer<uint32_t> step(1);
  DeviceBuffer<int> order(static_cast<size_t>(TILES) * PARTS);
  std::vector<int> perm(static_cast<size_t>(TILES) * PARTS);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(perm.begin(), perm.end(), rng);
  order.upload(perm);
  MEGAOPS_CUDA_CHECK(cudaMemset(counters.ptr, 0, TILES * sizeof(uint32_t)));
  MEGAOPS_CUDA_CHECK(cudaMemset(step.ptr, 0, sizeof(uint32_t)));
  mid.poison();
  MEGAOPS_CUDA_CHECK(cudaDeviceSynchronize());

  ProducerArgs pa{};
  pa.mid = mid.ptr;
  pa.counters = counters.ptr;
  pa.order = order.ptr;
  pa.step_ptr = step.ptr;
  pa.rotate_by_step = true;
  pa.num_tiles = TILES;
  pa.tile_elems = ELEMS;
  pa.parts = PARTS;
  pa.value_seed = seed;
  pa.delay = DelayParams{1000, seed ^ 0xde1a7};
  ConsumerArgs ca{};
  ca.mid = mid.ptr;
  ca.counters = counters.ptr;
  ca.step_ptr = step.ptr;
  ca.num_tiles = TILES;
  ca.tile_elems = ELEMS;
  ca.parts = PARTS;
  ca.wd = wd.params();
  ConsumerArgs copy_args = ca;
  copy_args.out = out_copy.ptr;
  copy_args.rotation = 17;
  copy_args.op = OP_COPY;
  ConsumerArgs gemv_args = ca;
  gemv_args.out = out_gemv.ptr;
  gemv_args.rows = ROWS;
  gemv_args.rotation = 5;
  gemv_args.op = OP_GEMV;

  CudaStream s0, s1, s2;
  CudaEvent fork(cudaEventDisableTiming), join1(cudaEventDisableTiming),
      join2(cudaEventDisableTiming);
  cudaGraph_t graph = nullptr;
  MEGAOPS_CUDA_CHECK(cudaStreamBeginCapture(s0.s, cudaStreamCaptureModeThreadLocal));
  MEGAOPS_CUDA_CHECK(cudaMemsetAsync(out_copy.ptr, 0xff, out_copy.n * sizeof(uint32_t), s0.s));
  MEGAOPS_CUDA_CHECK(cudaMemsetAsync(out_gemv.ptr, 0xff, out_gemv.n * sizeof(uint32_t), s0.s));
  advance_step_kernel<<<1, 1, 0, s0.s>>>(step.ptr);
  MEGAOPS_CUDA_CHECK(cudaGetLastError());
  MEGAOPS_CUDA_CHECK(cudaEventRecord(fork.e, s0.s));
  MEGAOPS_CUDA_CHECK(cudaStreamWaitEvent(s1.s, fork.e, 0));
  MEGAOPS_CUDA_CHECK(cudaStreamWaitEvent(s2.s, fork.e, 0));
  copy_consumer_kernel<<<copy_ctas, THREADS, 0, s1.s>>>(copy_args);
  MEGAOPS_CUDA_CHECK(cudaGetLastError());
  gemv_consumer_kernel<<<gemv_ctas, THREADS, 0, s2.s>>>(gemv_args);
  MEGAOPS_CUDA_CHECK(cudaGetLastError());
  producer_kernel<<<producer_ctas, THREADS, 0, s0.s>>>(pa);
  MEGAOPS_CUDA_CHECK(cudaGetLastError());
  MEGAOPS_CUDA_CHECK(cudaEventRecord(join1.e, s1.s));
  MEGAOPS_CUDA_CHECK(cudaEventRecord(join2.e, s2.s));
  MEGAOPS_CUDA_CHECK(cudaStreamWaitEvent(s0.s, join1.e, 0));
  MEGAOPS_CUDA_CHECK(cudaStreamWaitEvent(s0.s, join2.e, 0));
  MEGAOPS_CUDA_CHECK(cudaStreamEndCapture(s0.s, &graph));
  cudaGraphExec_t exec = nullptr;
  MEGAOPS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

  for (int r = 1; r <= REPLAYS; ++r) {
    ASSERT_EQ(cudaGraphLaunch(exec, s0.s), cudaSuccess) << "replay " << r;
    if (r % CHECK_EVERY != 0) continue;
    wd.check(cudaStreamSynchronize(s0.s), OP_NAMES);
    const uint32_t s = static_cast<uint32_t>(r);
    ASSERT_EQ(step.download()[0], s);
    const long bad_copy = first_mismatch(out_copy.download(), expected_copy(seed, s, TILES, ELEMS));
    ASSERT_EQ(bad_copy, -1) << "copy consumer, replay " << r;
    const long bad_gemv =
        first_mismatch(out_gemv.download(), expected_gemv(seed, s, TILES, ELEMS, ROWS));
    ASSERT_EQ(bad_gemv, -1) << "gemv consumer, replay " << r;
  }
  const auto counts = counters.download();
  uint64_t total = 0;
  for (int t = 0; t < TILES; ++t) {
    EXPECT_EQ(counts[t], static_cast<uint32_t>(REPLAYS * PARTS)) << "tile " << t;
    total += counts[t];
  }
  EXPECT_EQ(total, static_cast<uint64_t>(REPLAYS) * PARTS * TILES);
  MEGAOPS_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MEGAOPS_CUDA_CHECK(cudaGraphDestroy(graph));
}

// Runs in the death test's child process: a consumer waits for tile 5, which no producer ever
// signals. The wait must trap after the 500 ms watchdog, and the host must name op and tile from
// the mapped record even though the trap killed the context. Exits 3 with the message on stderr.
[[noreturn]] void run_lost_signal() {
  try {
    constexpr int TILES = 8;
    constexpr int ELEMS = 64;
    WatchdogRecord wd(500);
    DeviceBuffer<uint32_t> mid(TILES * ELEMS), out(TILES * ELEMS), counters(TILES);
    std::vector<uint32_t> counts(TILES, 1);
    counts[5] = 0;  // the lost signal
    counters.upload(counts);
    mid.poison();
    MEGAOPS_CUDA_CHECK(cudaDeviceSynchronize());
    ConsumerArgs ca{};
    ca.mid = mid.ptr;
    ca.out = out.ptr;
    ca.counters = counters.ptr;
    ca.target = 1;
    ca.num_tiles = TILES;
    ca.tile_elems = ELEMS;
    ca.parts = 1;
    ca.op = OP_LOST;
    ca.wd = wd.params();
    copy_consumer_kernel<<<TILES, THREADS>>>(ca);
    MEGAOPS_CUDA_CHECK(cudaGetLastError());
    wd.check(cudaDeviceSynchronize(), OP_NAMES);
    std::fprintf(stderr, "the lost signal was not reported\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::fflush(stderr);
    _exit(3);
  }
  _exit(1);
}

TEST(TileSemaphoreDeathTest, WatchdogNamesLostSignal) {
  MEGAOPS_REQUIRE_GPU();
  // The trap leaves the CUDA context unusable, so the lost signal runs in a child process;
  // "threadsafe" re-executes the binary instead of forking a process that may hold a context.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EXIT(run_lost_signal(), ::testing::ExitedWithCode(3),
              "watchdog: op 'lost_signal_test' tile 5 waited for count >= 1, observed 0");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Child start-up (CUDA context) + 500 ms timeout + reporting; a hang would take forever.
  EXPECT_LT(seconds, 5.0);
}

}  // namespace
}  // namespace megaops
