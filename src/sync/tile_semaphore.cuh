// Tile semaphores: the device API with which a producer kernel says "tile i of my output is
// written" and a consumer kernel on another stream waits for exactly the tiles it reads (DESIGN.md,
// "Tile contracts" and "Rules the overlap runtime must keep"). Framework-free: it knows counters,
// targets and a watchdog, nothing of ops, plans or executors.
//
// Counters are monotonic, never reset (rule 3). A tile signalled k times per step is ready in step
// s (1-based) when its counter >= s * k (tile_target); kernels read s from device memory at start,
// so a captured step replays without host updates. Comparisons are wrap-safe, so a counter may run
// past 2^32 as long as no consumer lags its producer by 2^31 signals.
//
// Memory ordering (see atomics.cuh for the model):
// - Producer: every thread writes its part of the tile; __syncthreads() (bar.sync) orders all those
//   writes before thread 0's next operation; thread 0's red.release.gpu is cumulative, so it
//   publishes the whole CTA's writes, not only its own. Without the barrier a release by thread 0
//   says nothing about writes of other warps still in flight.
// - Consumer: thread 0's ld.acquire.gpu that reads count >= target synchronises with every release
//   add counted in that value (the adds form one release sequence, which is why signals are RMW
//   adds, never stores); the following __syncthreads() extends that happens-before edge to every
//   thread of the CTA, whose ordinary loads of the tile then see the producer's data.
// - Consumers read tiles with ordinary loads: never ld.global.nc / __ldg / `const __restrict__`
//   (the non-coherent path may return data older than the acquire). Tiles written or read by the
//   async proxy (TMA, cp.async.bulk) additionally need the bulk group completed and
//   `fence.proxy.async` on the producer side before tile_signal, and after the wait on the
//   consumer side before the bulk load.
#pragma once

#include <cstdint>

#include "sync/atomics.cuh"
#include "sync/error_record.h"

namespace megaops {

// The counters of one tensor's tiles, one uint32 per tile, in device memory, zeroed once at
// allocation and never again.
struct TileSemaphores {
  uint32_t* counters = nullptr;
  int num_tiles = 0;

  __host__ __device__ uint32_t* tile(int i) const { return counters + i; }
};

// What a wait reports if it times out: the waiting op's id (an index into the executor's op names)
// and the tile it waited for.
struct WaitSite {
  uint32_t op = 0;
  uint32_t tile = 0;
};

// Back-off of a waiting thread: the first sleep; the cap of the doubling is
// WatchdogParams::sleep_max_ns (DEFAULT_WAIT_SLEEP_MAX_NS, ExecutorOptions::wait_sleep_max_ns).
constexpr uint32_t TILE_WAIT_SLEEP_MIN_NS = 32;

// The count at which a tile signalled `signals_per_step` times per step is ready in step `step`
// (1-based). Wraps modulo 2^32, matching tile_count_reached.
__host__ __device__ inline uint32_t tile_target(uint32_t step, uint32_t signals_per_step) {
  return step * signals_per_step;
}

// count >= target, modulo 2^32: true while count is in [target, target + 2^31).
__host__ __device__ inline bool tile_count_reached(uint32_t count, uint32_t target) {
  return static_cast<int32_t>(count - target) >= 0;
}

// ---- signal ----

// Adds `count` (default 1) arrivals to a tile counter with release semantics. Call from ONE
// thread, after a __syncthreads() that follows all of the CTA's writes of the tile (or use
// tile_signal_cta, which does both).
__device__ __forceinline__ void tile_signal(uint32_t* counter, uint32_t count = 1) {
  red_add_release_gpu(counter, count);
}

// Signals a tile the whole CTA has written: must be reached by every thread of the CTA. Every write
// any thread made before the call is published with the signal.
__device__ __forceinline__ void tile_signal_cta(uint32_t* counter, uint32_t count = 1) {
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) tile_signal(counter, count);
}

// ---- wait ----

namespace detail {

__device__ __forceinline__ uint32_t linear_block_index() {
  return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
}

// The slow path of a wait past its deadline: fill the error record (first timed-out thread on the
// device wins the claim) and trap. Never returns. Kept out of line so the waiting loop stays small,
// and it takes scalars only: a reference into a kernel's parameter struct would make the compiler
// copy the whole struct to local memory at kernel entry and read every field from there (measured
// on the H200: a 208-byte stack frame in every hooked kernel, each pointer read an L2 round trip).
inline __device__ __noinline__ void watchdog_trip(DeviceErrorRecord* record, uint32_t* claim,
                                                  uint32_t op, uint32_t tile, uint32_t target,
                                                  uint32_t observed, uint64_t elapsed_ns) {
  // Claim states: 0 free, 1 being written, 2 written (visible to the host).
  constexpr uint32_t CLAIM_WRITING = 1;
  constexpr uint32_t CLAIM_DONE = 2;
  // Upper bound on how long a loser waits for the winner before trapping anyway.
  constexpr uint64_t LOSER_WAIT_NS = 10000000;  // 10 ms
  if (record != nullptr && claim != nullptr) {
    if (atom_cas_relaxed_gpu(claim, 0, CLAIM_WRITING) == 0) {
      DeviceErrorRecord* r = record;
      st_relaxed_sys(&r->op, op);
      st_relaxed_sys(&r->tile, tile);
      st_relaxed_sys(&r->expected, target);
      st_relaxed_sys(&r->observed, observed);
      st_relaxed_sys(&r->block, linear_block_index());
      st_relaxed_sys(&r->elapsed_ns, elapsed_ns);
      // Release: a host that reads the flag (acquire) sees the fields above.
      st_release_sys(&r->flag, WATCHDOG_TRIPPED);
      // Make the record reach host memory before anything after this point, the trap included.
      fence_sc_sys();
      st_relaxed_gpu(claim, CLAIM_DONE);
    } else {
      // Another thread is writing the record. A trap here would kill the grid (and maybe that
      // writer) before the record is complete, so let it finish first.
      const uint64_t start = globaltimer_ns();
      while (ld_relaxed_gpu(claim) != CLAIM_DONE && globaltimer_ns() - start < LOSER_WAIT_NS)
        sleep_ns(1000);
    }
  }
  __trap();
}

}  // namespace detail

// Waits until *counter >= target (wrap-safe) with acquire semantics: the caller's later loads see
// everything the producers published with their signals. Spins with ld.acquire.gpu and __nanosleep
// back-off (TILE_WAIT_SLEEP_MIN_NS doubling up to wd.sleep_max_ns; 0 = no sleep). Bounded by the
// watchdog: past wd.timeout_ns (0 = unbounded) it writes the error record and traps. Call from ONE
// thread (or use tile_wait_cta). Returns true when it had to wait (a stall), false when the tile
// was ready at the first read; the fast path reads no timer.
// kSys: the counter lives on (or is signalled by) another GPU, so the acquire is at system scope
// (tile_wait_sys).
template <bool kSys = false>
__device__ __forceinline__ uint32_t ld_acquire_scoped(const uint32_t* p) {
  if constexpr (kSys)
    return ld_acquire_sys(p);
  else
    return ld_acquire_gpu(p);
}

template <bool kSys = false>
__device__ __forceinline__ bool tile_wait(const uint32_t* counter, uint32_t target,
                                          const WaitSite& site, const WatchdogParams& wd) {
  uint32_t observed = ld_acquire_scoped<kSys>(counter);
  if (tile_count_reached(observed, target)) return false;
  const uint64_t start = wd.timeout_ns != 0 ? globaltimer_ns() : 0;
  const uint32_t cap = wd.sleep_max_ns;
  uint32_t sleep = TILE_WAIT_SLEEP_MIN_NS < cap ? TILE_WAIT_SLEEP_MIN_NS : cap;
  for (;;) {
    if (sleep != 0) sleep_ns(sleep);
    observed = ld_acquire_scoped<kSys>(counter);
    if (tile_count_reached(observed, target)) return true;
    sleep = sleep * 2 < cap ? sleep * 2 : cap;
    if (wd.timeout_ns != 0) {
      const uint64_t elapsed = globaltimer_ns() - start;
      if (elapsed > wd.timeout_ns)
        detail::watchdog_trip(wd.record, wd.claim, site.op, site.tile, target, observed, elapsed);
    }
  }
}

// A wait on a counter another GPU signals (peer memory, or this GPU's memory written by a peer).
__device__ __forceinline__ bool tile_wait_sys(const uint32_t* counter, uint32_t target,
                                              const WaitSite& site, const WatchdogParams& wd) {
  return tile_wait<true>(counter, target, site, wd);
}

// CTA-wide wait: thread 0 waits (acquire), then the barrier hands its view to every thread. Must be
// reached by every thread of the CTA.
__device__ __forceinline__ void tile_wait_cta(const uint32_t* counter, uint32_t target,
                                              const WaitSite& site, const WatchdogParams& wd) {
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0)
    tile_wait(counter, target, site, wd);
  __syncthreads();
}

// ---- injected delays (stress tests) ----

// Runtime-controlled random delays: kernels that take a DelayParams in their params can be stressed
// without a special build. max_delay_ns == 0 (the default) costs one compare.
struct DelayParams {
  uint32_t max_delay_ns = 0;
  uint64_t seed = 0;
};

namespace detail {

// splitmix64 finaliser: enough mixing to decorrelate delays of neighbouring sites.
__host__ __device__ inline uint64_t delay_mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace detail

// Sleeps the calling thread for at least `ns` nanoseconds by the global timer.
__device__ inline void spin_for_ns(uint64_t ns) {
  const uint64_t start = globaltimer_ns();
  for (;;) {
    const uint64_t elapsed = globaltimer_ns() - start;
    if (elapsed >= ns) return;
    const uint64_t left = ns - elapsed;
    sleep_ns(left < 256 ? static_cast<uint32_t>(left) : 256u);
  }
}

// The delay random_delay picks for (seed, site): uniform in [0, max_delay_ns]. Host-callable so a
// test can predict it.
__host__ __device__ inline uint32_t random_delay_ns(const DelayParams& d, uint64_t site) {
  if (d.max_delay_ns == 0) return 0;
  return static_cast<uint32_t>(detail::delay_mix(d.seed ^ detail::delay_mix(site)) %
                               (static_cast<uint64_t>(d.max_delay_ns) + 1));
}

// Waits a pseudo-random time in [0, max_delay_ns] determined by (seed, site). Threads of a CTA that
// pass the same site wait about the same time, so it can be called by all threads or by one.
__device__ __forceinline__ void random_delay(const DelayParams& d, uint64_t site) {
  if (d.max_delay_ns == 0) return;
  spin_for_ns(random_delay_ns(d, site));
}

#if !defined(MEGAOPS_INJECT_DELAY_MAX_NS)
#define MEGAOPS_INJECT_DELAY_MAX_NS 20000
#endif

// Compile-time injected delay for stress builds (MEGAOPS_BENCH_DELAYS=ON defines
// MEGAOPS_INJECT_DELAYS): producers call it unconditionally before signalling; in normal builds it
// compiles to nothing.
__device__ __forceinline__ void maybe_delay(uint64_t seed, uint64_t site) {
#if defined(MEGAOPS_INJECT_DELAYS)
  random_delay(DelayParams{MEGAOPS_INJECT_DELAY_MAX_NS, seed}, site);
#else
  (void)seed;
  (void)site;
#endif
}

}  // namespace megaops
