// The watchdog's error record: where a tile wait that timed out writes what it waited for before it
// traps, and the host object that owns it and turns it into a DeviceError naming op and tile.
//
// Why mapped pinned host memory: __trap() leaves the CUDA context in a sticky error state, after
// which no device memory can be read and no copy can be issued. The record therefore lives in
// page-locked host memory mapped into the device's address space; the trapping thread writes it
// with system-scope stores and a system fence, and the host reads it after the failed
// synchronisation with plain CPU loads, no CUDA call needed.
//
// The POD types here are shared with device code (sync/tile_semaphore.cuh) and contain no CUDA
// types; the class is host-only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

namespace megaops {

// Value of DeviceErrorRecord::flag once a record is complete ("WDOG").
constexpr uint32_t WATCHDOG_TRIPPED = 0x57444f47u;

// Default bound on one tile wait; the owner of a WatchdogRecord may pass another.
constexpr uint64_t DEFAULT_WATCHDOG_MS = 2000;
// Default cap of a waiting thread's back-off sleep (ns); the owner of a WatchdogRecord may pass
// another.
// The cap bounds how late a waiter notices a signal (about one sleep; __nanosleep may sleep up to
// twice the request), the floor of the doubling (TILE_WAIT_SLEEP_MIN_NS) the L2 polling traffic.
// 64: a doubling of one step from TILE_WAIT_SLEEP_MIN_NS keeps a back-off (DESIGN rule 4) and most
// of what spinning buys. Overlap step, ms/token at caps 256 / 64 / 0, batch 1 (two alternated
// rounds on one H200; docs/perf-notes.md, "The waits' back-off cap"): qwen3-0.6b 1.198-1.200 /
// 1.172-1.176 / 1.159-1.160, llama3.2-1b 1.172-1.184 / 1.167-1.169 / 1.163-1.165, llama3.1-8b
// 5.105-5.111 / 5.091-5.096 / 5.089-5.096; batch 8 faster or level, batch 32 level (within 0.3%). A
// cap of 1,024 measured 5% slower than 256.
constexpr uint32_t DEFAULT_WAIT_SLEEP_MAX_NS = 64;
constexpr uint32_t MAX_WAIT_SLEEP_MAX_NS = 1000000;

// Written once by the device (first timed-out wait of the process wins), read by the host.
// `flag` is written last with a release store, so when the host reads WATCHDOG_TRIPPED with an
// acquire load every other field is complete.
struct DeviceErrorRecord {
  uint32_t flag;        // 0 while clear; WATCHDOG_TRIPPED once the record is complete
  uint32_t op;          // WaitSite::op of the waiting op (index into the executor's op names)
  uint32_t tile;        // WaitSite::tile: the tile it waited for
  uint32_t expected;    // the target count
  uint32_t observed;    // the count it last read
  uint32_t block;       // linear block index of the waiting CTA
  uint64_t elapsed_ns;  // how long it waited, by the device's global timer
};
static_assert(sizeof(DeviceErrorRecord) == 32, "record layout is shared with device code");

// What a tile wait needs to enforce its bound: device pointers and the timeout. Passed by value in
// kernel params. timeout_ns == 0 disables the watchdog (the wait spins forever; for measuring the
// watchdog's fast-path cost, never for production).
// sleep_max_ns is the wait's back-off cap (0 = spin without sleeping), carried here because every
// wait takes these params.
struct WatchdogParams {
  DeviceErrorRecord* record = nullptr;  // device alias of the mapped host record
  uint32_t* claim = nullptr;            // device word electing the one writer of the record
  uint64_t timeout_ns = 0;
  uint32_t sleep_max_ns = DEFAULT_WAIT_SLEEP_MAX_NS;
};

// The command-line spellings of the two settings: a watchdog bound in milliseconds (a
// non-negative integer, 0 = no watchdog) and a back-off cap in nanoseconds
// (0..MAX_WAIT_SLEEP_MAX_NS, 0 = spin). InputError naming `what` (the option) and the value
// otherwise.
uint64_t parse_watchdog_ms(const std::string& v, const std::string& what);
uint32_t parse_wait_sleep_max_ns(const std::string& v, const std::string& what);

// Owns one error record (mapped pinned host memory) and its claim word (device memory). One per
// executor: every kernel of a step gets params() and the first wait to time out fills the record.
class WatchdogRecord {
 public:
  // Allocates on the current device; throws DeviceError on failure.
  explicit WatchdogRecord(uint64_t timeout_ms = DEFAULT_WATCHDOG_MS,
                          uint32_t sleep_max_ns = DEFAULT_WAIT_SLEEP_MAX_NS);
  ~WatchdogRecord();
  WatchdogRecord(const WatchdogRecord&) = delete;
  WatchdogRecord& operator=(const WatchdogRecord&) = delete;

  WatchdogParams params() const;
  uint64_t timeout_ms() const { return timeout_ms_; }
  uint32_t sleep_max_ns() const { return sleep_max_ns_; }

  // Whether a device wait has filled the record. Readable after the context died.
  bool tripped() const;
  // The op id of the wait that tripped (DeviceErrorRecord::op); UINT32_MAX when not tripped.
  uint32_t tripped_op() const;

  // The record as one line, e.g. "watchdog: op 'o_proj' tile 7 waited for count >= 12, observed 11
  // after 2000 ms (block 3)"; op ids outside `op_names` print as "op #id". Empty when not tripped.
  std::string describe(const std::vector<std::string>& op_names = {}) const;

  // Throws DeviceError(describe(op_names)) when tripped.
  void throw_if_tripped(const std::vector<std::string>& op_names = {}) const;

  // For the status of a synchronisation: a tripped watchdog explains the failure better than the
  // "unspecified launch failure" that __trap() leaves, so it is thrown first; otherwise any error
  // status throws DeviceError with its CUDA name.
  void check(cudaError_t status, const std::vector<std::string>& op_names = {}) const;

 private:
  DeviceErrorRecord* host_ = nullptr;
  DeviceErrorRecord* device_ = nullptr;
  uint32_t* claim_ = nullptr;
  uint64_t timeout_ms_ = 0;
  uint32_t sleep_max_ns_ = DEFAULT_WAIT_SLEEP_MAX_NS;
};

}  // namespace megaops
