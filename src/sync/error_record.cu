// Host side of the watchdog (see error_record.h): allocation of the mapped record, the parsers of
// its settings, and the message that names the op and tile of a hang.
#include <cuda_runtime.h>

#include <cerrno>
#include <cstdlib>
#include <limits>

#include "core/error.h"
#include "sync/error_record.h"

namespace megaops {

namespace {

// Frees what a partly constructed record holds; errors are ignored because the context may already
// be dead (after a trap) and there is nothing better to do with them in a destructor.
void release(DeviceErrorRecord* host, uint32_t* claim) {
  if (claim) cudaFree(claim);
  if (host) cudaFreeHost(host);
}

}  // namespace

namespace {

// A non-negative decimal integer, at most `max`. `what` names the option and `unit` says what the
// number is, for the error line.
uint64_t parse_uint(const std::string& v, uint64_t max, const std::string& what, const char* unit) {
  const char* s = v.c_str();
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(s, &end, 10);
  if (v.empty() || errno != 0 || *end != '\0' || *s < '0' || *s > '9' || n > max)
    throw_input_error("option", what, std::string("expected ") + unit + ", got '" + v + "'");
  return static_cast<uint64_t>(n);
}

}  // namespace

uint64_t parse_watchdog_ms(const std::string& v, const std::string& what) {
  return parse_uint(v, UINT64_MAX, what,
                    "milliseconds as a non-negative integer (0 = no watchdog)");
}

uint32_t parse_wait_sleep_max_ns(const std::string& v, const std::string& what) {
  return static_cast<uint32_t>(parse_uint(v, MAX_WAIT_SLEEP_MAX_NS, what,
                                          "nanoseconds, 0..1000000 (0 = spin without sleeping)"));
}

WatchdogRecord::WatchdogRecord(uint64_t timeout_ms, uint32_t sleep_max_ns)
    : timeout_ms_(timeout_ms), sleep_max_ns_(sleep_max_ns) {
  auto fail = [&](const char* what, cudaError_t err) {
    release(host_, claim_);
    host_ = nullptr;
    claim_ = nullptr;
    throw DeviceError(std::string("watchdog record: ") + what +
                      " failed: " + cudaGetErrorString(err));
  };
  void* host = nullptr;
  cudaError_t err = cudaHostAlloc(&host, sizeof(DeviceErrorRecord), cudaHostAllocMapped);
  if (err != cudaSuccess) fail("cudaHostAlloc(mapped)", err);
  host_ = static_cast<DeviceErrorRecord*>(host);
  *host_ = DeviceErrorRecord{};
  void* device = nullptr;
  err = cudaHostGetDevicePointer(&device, host, 0);
  if (err != cudaSuccess) fail("cudaHostGetDevicePointer", err);
  device_ = static_cast<DeviceErrorRecord*>(device);
  void* claim = nullptr;
  err = cudaMalloc(&claim, sizeof(uint32_t));
  if (err != cudaSuccess) fail("cudaMalloc(claim)", err);
  claim_ = static_cast<uint32_t*>(claim);
  // Synchronised so that kernels on non-blocking streams, which do not wait for the legacy default
  // stream, never see the claim word before it is cleared.
  err = cudaMemsetAsync(claim_, 0, sizeof(uint32_t), nullptr);
  if (err == cudaSuccess) err = cudaStreamSynchronize(nullptr);
  if (err != cudaSuccess) fail("clearing the claim word", err);
}

WatchdogRecord::~WatchdogRecord() {
  release(host_, claim_);
}

WatchdogParams WatchdogRecord::params() const {
  WatchdogParams p;
  p.record = device_;
  p.claim = claim_;
  constexpr uint64_t MAX_MS = std::numeric_limits<uint64_t>::max() / 1000000u;
  p.timeout_ns = (timeout_ms_ > MAX_MS ? MAX_MS : timeout_ms_) * 1000000u;
  p.sleep_max_ns = sleep_max_ns_ > MAX_WAIT_SLEEP_MAX_NS ? MAX_WAIT_SLEEP_MAX_NS : sleep_max_ns_;
  return p;
}

bool WatchdogRecord::tripped() const {
  // Acquire: pairs with the device's st.release.sys of the flag, so the fields read afterwards are
  // the ones written before it.
  return __atomic_load_n(&host_->flag, __ATOMIC_ACQUIRE) == WATCHDOG_TRIPPED;
}

uint32_t WatchdogRecord::tripped_op() const {
  return tripped() ? host_->op : UINT32_MAX;
}

std::string WatchdogRecord::describe(const std::vector<std::string>& op_names) const {
  if (!tripped()) return {};
  const DeviceErrorRecord r = *host_;
  const std::string op =
      r.op < op_names.size() ? "op '" + op_names[r.op] + "'" : "op #" + std::to_string(r.op);
  const uint64_t ms = (r.elapsed_ns + 500000u) / 1000000u;
  return "watchdog: " + op + " tile " + std::to_string(r.tile) +
         " waited for count >= " + std::to_string(r.expected) + ", observed " +
         std::to_string(r.observed) + " after " + std::to_string(ms) + " ms (block " +
         std::to_string(r.block) + ")";
}

void WatchdogRecord::throw_if_tripped(const std::vector<std::string>& op_names) const {
  if (tripped()) throw DeviceError(describe(op_names));
}

void WatchdogRecord::check(cudaError_t status, const std::vector<std::string>& op_names) const {
  throw_if_tripped(op_names);
  if (status != cudaSuccess)
    throw DeviceError(std::string("device error: ") + cudaGetErrorName(status) + ": " +
                      cudaGetErrorString(status));
}

}  // namespace megaops
