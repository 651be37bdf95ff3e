// The cuDNN member of the CUDA_CHECK macro family (core/cuda_check.h): throws a DeviceError
// naming the statement, file, line and cuDNN's status string. Apart from cuda_check.h so that only
// the files that call cuDNN include its headers.
#pragma once

#include <cudnn.h>

#include "core/cuda_check.h"

#define MEGAOPS_CUDNN_CHECK(stmt)                                                               \
  do {                                                                                          \
    cudnnStatus_t megaops_st_ = (stmt);                                                         \
    if (megaops_st_ != CUDNN_STATUS_SUCCESS)                                                    \
      ::megaops::throw_cuda_error(#stmt, cudnnGetErrorString(megaops_st_), __FILE__, __LINE__); \
  } while (0)
