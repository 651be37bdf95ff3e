// The NCCL communicator of one tensor-parallel rank (issue 6). NCCL is loaded at run time (dlopen
// of libnccl.so.2, or the library the caller names), so the megaops binaries start without it
// wherever no tensor parallelism is asked for. Rank 0 creates NCCL's unique id (nccl_unique_id)
// and the caller hands it to the other ranks (tools/tp_launch: through a rendezvous file,
// io/rendezvous.h, so one path spans hosts); every rank then joins with ncclCommInitRank on device
// `device`.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

namespace megaops {

// The NCCL entry points megaops uses, resolved from the loaded library.
struct NcclApi {
  ncclResult_t (*get_unique_id)(ncclUniqueId*) = nullptr;
  ncclResult_t (*comm_init_rank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                             cudaStream_t) = nullptr;
  ncclResult_t (*all_gather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                             cudaStream_t) = nullptr;
  const char* (*get_error_string)(ncclResult_t) = nullptr;
};

// The default NCCL library (a name the dynamic loader resolves).
inline constexpr const char* DEFAULT_NCCL_LIB = "libnccl.so.2";

// Loads NCCL once, from `lib` (empty: DEFAULT_NCCL_LIB) on the first call; later calls return the
// loaded one. Throws DeviceError naming the library and the loader's message on failure.
const NcclApi& nccl_api(const std::string& lib = "");

// Throws DeviceError("<what>: <NCCL's message>") unless r is ncclSuccess.
void nccl_check(ncclResult_t r, const char* what);

// A new NCCL unique id for a job (NCCL_UNIQUE_ID_BYTES bytes), from the library nccl_api(nccl_lib)
// loads. Throws DeviceError on NCCL failures.
std::string nccl_unique_id(const std::string& nccl_lib = "");

class TpComm {
 public:
  // Joins the job whose NCCL unique id (nccl_unique_id, rank 0's) is `unique_id`. Throws
  // InputError on tp < 1, rank outside [0, tp) or an id of another size; DeviceError on NCCL
  // failures. nccl_lib: the NCCL library to load (nccl_api).
  TpComm(int tp, int rank, int device, const std::string& unique_id,
         const std::string& nccl_lib = "");
  ~TpComm();
  TpComm(const TpComm&) = delete;
  TpComm& operator=(const TpComm&) = delete;

  ncclComm_t comm() const { return comm_; }
  int tp() const { return tp_; }
  int rank() const { return rank_; }

 private:
  ncclComm_t comm_ = nullptr;
  int tp_ = 1, rank_ = 0;
};

}  // namespace megaops
