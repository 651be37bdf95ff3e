// Every memory-ordering primitive megaops uses, in one header, named by semantics and scope
// (`ld_acquire_gpu`, `red_add_release_gpu`), as inline PTX for sm_70+. Kernels and the tile
// semaphores use only these, never `volatile` polling or bare __threadfence(), so each ordering
// decision is visible by name and reasoned about here once.
//
// The PTX memory model in four sentences (PTX ISA, "Memory Consistency Model"):
// - Plain loads/stores are *weak*: they give no ordering across threads by themselves.
// - A *release* operation by thread T orders before it every memory operation that precedes it in
//   T's causality order, including other threads' writes that T has synchronised with (through
//   bar.sync or an earlier acquire). This is *cumulativity*: a release by one thread can publish a
//   whole CTA's writes, provided a CTA barrier orders those writes before the release.
// - An *acquire* operation that reads the value written by a release (or by any later
//   read-modify-write of the same location: a release sequence) synchronises with it; everything
//   the releaser published then happens-before everything after the acquire, in that thread and in
//   any thread that later synchronises with it (e.g. through bar.sync).
// - The scope (.cta, .gpu, .sys) says which threads the guarantee holds for: .gpu for kernels of
//   one device talking through device memory, .sys when the host reads the result (error records
//   in mapped pinned memory).
//
// A caveat every consumer must keep: the non-coherent read path (`ld.global.nc`, __ldg, and what
// nvcc emits for `const T* __restrict__` arguments) is outside the memory model; data read that way
// may be stale even after an acquire. A buffer that another kernel writes while this one runs must
// be read with ordinary loads.
#pragma once

#include <cstdint>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 700
#error "megaops sync primitives need sm_70+ (scoped acquire/release PTX, nanosleep, globaltimer)"
#endif

namespace megaops {

// ---- gpu scope: kernels of one device synchronising through device (global) memory ----

// Acquire load: if it reads a value published by a release (or a release sequence), all writes
// made visible by that release are visible to this thread's later loads. Costs roughly an L2
// round trip (the SM's L1 cannot serve it).
__device__ __forceinline__ uint32_t ld_acquire_gpu(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Relaxed load: a coherent (never stale-forever) read with no ordering; pair it with
// fence_acq_rel_gpu() after the loop to form an acquire pattern when polling.
__device__ __forceinline__ uint32_t ld_relaxed_gpu(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Release store: prior writes (cumulatively, see above) are visible to whoever acquires this value.
// Use only when a location has a single writer; counters shared by several producers use
// red_add_release_gpu so that every producer's release stays in the release sequence.
__device__ __forceinline__ void st_release_gpu(uint32_t* p, uint32_t v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Relaxed store: coherent, unordered.
__device__ __forceinline__ void st_relaxed_gpu(uint32_t* p, uint32_t v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Release add without a return value (`red`, fire-and-forget, cheaper than `atom`). The signal of
// the tile semaphores: because it is a read-modify-write, a consumer that reads any later value of
// the counter synchronises with *every* earlier release add (they form one release sequence), so
// several producers may contribute to one counter and a reader of `count >= n` sees all n of them.
__device__ __forceinline__ void red_add_release_gpu(uint32_t* p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Acquire-release add returning the old value: for arrival counters where the last arriver goes on
// to read what the others published (e.g. a split-K reduction's final CTA).
__device__ __forceinline__ uint32_t atom_add_acq_rel_gpu(uint32_t* p, uint32_t v) {
  uint32_t old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;"
               : "=r"(old)
               : "l"(p), "r"(v)
               : "memory");
  return old;
}

// Relaxed compare-and-swap returning the old value: mutual exclusion where the winner publishes its
// results through some other release (used to elect the one thread that fills the error record).
__device__ __forceinline__ uint32_t atom_cas_relaxed_gpu(uint32_t* p, uint32_t expected,
                                                         uint32_t desired) {
  uint32_t old;
  asm volatile("atom.relaxed.gpu.global.cas.b32 %0, [%1], %2, %3;"
               : "=r"(old)
               : "l"(p), "r"(expected), "r"(desired)
               : "memory");
  return old;
}

// Acquire-release fence at gpu scope: turns relaxed accesses around it into release/acquire
// patterns (relaxed polling loop + this fence = acquire; this fence + relaxed store = release).
__device__ __forceinline__ void fence_acq_rel_gpu() {
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

// ---- sys scope: device writes the host reads (the watchdog's error record in mapped memory) ----
// Generic addressing (no .global): the target is pinned host memory seen through its device alias.

__device__ __forceinline__ void st_relaxed_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.relaxed.sys.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void st_relaxed_sys(uint64_t* p, uint64_t v) {
  asm volatile("st.relaxed.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Release store at system scope: the host, after an acquire read of this word, sees every earlier
// store of this thread (the record's fields), not a torn mix of old and new fields.
__device__ __forceinline__ void st_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// ---- sys scope between GPUs: counters another GPU reads or writes through peer memory ----
// (tensor parallelism, kernels/tp_reduce.cuh). Global addressing: device memory of this GPU or of
// a peer mapped into this process (CUDA IPC).

// Acquire load at system scope: after it reads a count, this thread's later loads see every write
// the signalling GPU published with its release (red_add_release_sys).
__device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Release add at system scope: publishes this thread's earlier writes (and, cumulatively, what it
// has observed) to any GPU that acquires the counter.
__device__ __forceinline__ void red_add_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("red.release.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Sequentially consistent fence at system scope (membar.sys): prior writes are performed for the
// whole system, host included, before anything after it, in particular before a __trap() tears the
// context down.
__device__ __forceinline__ void fence_sc_sys() {
  asm volatile("fence.sc.sys;" ::: "memory");
}

// ---- time ----

// Nanoseconds of the global timer, shared by all SMs (its update granularity is GPU-dependent,
// ~32 ns to 1 us). Used for watchdog deadlines and injected delays, never for profiling.
__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Suspends the thread for about `ns` nanoseconds (the hardware picks a time in [0, 2*ns], capped
// near 1 ms), freeing issue slots for the warps that do useful work while this one waits.
__device__ __forceinline__ void sleep_ns(uint32_t ns) {
  __nanosleep(ns);
}

}  // namespace megaops
