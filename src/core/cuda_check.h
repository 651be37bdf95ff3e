// One macro family for CUDA runtime and cuBLAS status codes. Each throws a DeviceError naming the
// statement, file and line; launchers that must not throw return cudaError_t instead.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "core/error.h"

namespace megaops {

[[noreturn]] inline void throw_cuda_error(const char* what, const char* detail, const char* file,
                                          int line) {
  throw DeviceError(std::string(file) + ":" + std::to_string(line) + ": " + what +
                    " failed: " + detail);
}

}  // namespace megaops

#define MEGAOPS_CUDA_CHECK(stmt)                                                                \
  do {                                                                                          \
    cudaError_t megaops_err_ = (stmt);                                                          \
    if (megaops_err_ != cudaSuccess)                                                            \
      ::megaops::throw_cuda_error(#stmt, cudaGetErrorString(megaops_err_), __FILE__, __LINE__); \
  } while (0)

#define MEGAOPS_CUBLAS_CHECK(stmt)                                                       \
  do {                                                                                   \
    cublasStatus_t megaops_st_ = (stmt);                                                 \
    if (megaops_st_ != CUBLAS_STATUS_SUCCESS)                                            \
      ::megaops::throw_cuda_error(#stmt, cublasLtGetStatusString(megaops_st_), __FILE__, \
                                  __LINE__);                                             \
  } while (0)
