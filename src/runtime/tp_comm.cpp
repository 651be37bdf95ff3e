// See tp_comm.h.
#include "runtime/tp_comm.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

#include "core/cuda_check.h"
#include "core/error.h"

namespace megaops {

namespace {

NcclApi load_nccl(const std::string& name) {
  const std::string lib = name.empty() ? DEFAULT_NCCL_LIB : name;
  void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr)
    throw DeviceError("NCCL: cannot load " + lib + " (" + dlerror() +
                      "); tensor parallelism needs it (--nccl-lib names another copy)");
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
    if (fn == nullptr) throw DeviceError("NCCL: " + lib + " has no " + name);
  };
  NcclApi a;
  sym(a.get_unique_id, "ncclGetUniqueId");
  sym(a.comm_init_rank, "ncclCommInitRank");
  sym(a.comm_destroy, "ncclCommDestroy");
  sym(a.all_reduce, "ncclAllReduce");
  sym(a.all_gather, "ncclAllGather");
  sym(a.get_error_string, "ncclGetErrorString");
  return a;  // the library stays loaded for the process
}

// NVLink multicast (NVLS) off unless the user asked for it: on shared multi-GPU hosts a program
// that uses it can take the GPUs out of service. NCCL reads the variable at init; ranks started by
// tools/tp_launch inherit it.
void disable_nvls_unless_asked() {
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
}

}  // namespace

const NcclApi& nccl_api(const std::string& lib) {
  static const NcclApi api = load_nccl(lib);
  return api;
}

void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess)
    throw DeviceError(std::string(what) + ": " + nccl_api().get_error_string(r));
}

std::string nccl_unique_id(const std::string& nccl_lib) {
  disable_nvls_unless_asked();
  ncclUniqueId id;
  nccl_check(nccl_api(nccl_lib).get_unique_id(&id), "ncclGetUniqueId");
  return std::string(reinterpret_cast<const char*>(&id), sizeof(id));
}

TpComm::TpComm(int tp, int rank, int device, const std::string& unique_id,
               const std::string& nccl_lib)
    : tp_(tp), rank_(rank) {
  if (tp < 1)
    throw_input_error("tensor parallel", "tp", "expected >= 1, found " + std::to_string(tp));
  if (rank < 0 || rank >= tp)
    throw_input_error("tensor parallel", "rank",
                      "expected 0.." + std::to_string(tp - 1) + ", found " + std::to_string(rank));
  ncclUniqueId id;
  if (unique_id.size() != sizeof(id))
    throw_input_error("tensor parallel", "unique id",
                      "expected " + std::to_string(sizeof(id)) + " bytes, found " +
                          std::to_string(unique_id.size()));
  disable_nvls_unless_asked();
  const NcclApi& nccl = nccl_api(nccl_lib);
  MEGAOPS_CUDA_CHECK(cudaSetDevice(device));
  std::memcpy(&id, unique_id.data(), sizeof(id));
  nccl_check(nccl.comm_init_rank(&comm_, tp, id, rank), "ncclCommInitRank");
}

TpComm::~TpComm() {
  if (comm_ != nullptr) nccl_api().comm_destroy(comm_);
}

}  // namespace megaops
