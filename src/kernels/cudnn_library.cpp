// See cudnn_library.h. The forwarders below have cuDNN's own names and signatures (from the
// toolkit's cudnn.h), so the cudnn-frontend headers, compiled as for a linked cuDNN, call them;
// each one jumps through the entry point load_cudnn resolved. They are hidden: nothing outside
// megaops' binary sees them, and a cuDNN that another library of the process linked keeps its own.
#include "kernels/cudnn_library.h"

#include <string>

namespace megaops {

std::string cudnn_version_text(int version) {
  return std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
         std::to_string(version % 100);
}

}  // namespace megaops

#ifndef MEGAOPS_HAVE_CUDNN

namespace megaops {

CudnnLibrary load_cudnn(const std::string& lib) {
  CudnnLibrary r;
  r.path = lib.empty() ? "libcudnn.so.9" : lib;
  r.error = "cuDNN: this build has no cuDNN SDPA path (configured with MEGAOPS_CUDNN OFF)";
  return r;
}

}  // namespace megaops

#else

#include <cudnn.h>
#include <dlfcn.h>
#include <nvrtc.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace megaops {

namespace {

// Every cuDNN entry point the frontend's headers reference: the graph API's (required), then four
// legacy filter calls of its convolution helpers that the SDPA graphs never make (optional: null
// where a cuDNN lacks them).
#define MEGAOPS_CUDNN_ENTRY_POINTS(X) \
  X(cudnnGetVersion)                  \
  X(cudnnGetErrorString)              \
  X(cudnnGetLastErrorString)          \
  X(cudnnCreate)                      \
  X(cudnnDestroy)                     \
  X(cudnnSetStream)                   \
  X(cudnnGetStream)                   \
  X(cudnnBackendCreateDescriptor)     \
  X(cudnnBackendDestroyDescriptor)    \
  X(cudnnBackendFinalize)             \
  X(cudnnBackendSetAttribute)         \
  X(cudnnBackendGetAttribute)         \
  X(cudnnBackendExecute)              \
  X(cudnnCreateFilterDescriptor)      \
  X(cudnnSetFilterNdDescriptor)       \
  X(cudnnDestroyFilterDescriptor)     \
  X(cudnnReorderFilterAndBias)

enum Entry {
#define MEGAOPS_CUDNN_ENUM(name) e_##name,
  MEGAOPS_CUDNN_ENTRY_POINTS(MEGAOPS_CUDNN_ENUM)
#undef MEGAOPS_CUDNN_ENUM
      ENTRY_COUNT,
  FIRST_OPTIONAL = e_cudnnCreateFilterDescriptor
};

const char* const ENTRY_NAMES[] = {
#define MEGAOPS_CUDNN_NAME(name) #name,
    MEGAOPS_CUDNN_ENTRY_POINTS(MEGAOPS_CUDNN_NAME)
#undef MEGAOPS_CUDNN_NAME
};

// Null until a load succeeded; then the library's entry points, never changed again.
std::atomic<void*> g_entries[ENTRY_COUNT];

template <typename Fn>
Fn entry(Entry e) {
  return reinterpret_cast<Fn>(g_entries[e].load(std::memory_order_acquire));
}

std::mutex g_load_mutex;
CudnnLibrary g_loaded;  // guarded by g_load_mutex

CudnnLibrary failure(const std::string& path, const std::string& why) {
  CudnnLibrary r;
  r.path = path;
  r.error = "cuDNN: " + why;
  return r;
}

// NVRTC, which the frontend's open-source engines for Blackwell call (never the Hopper SDPA graphs
// built here): loaded on first use, from the CUDA 13 runtime's soname; null entry points when it
// cannot be loaded, so those engines then report a compilation error.
void* nvrtc_symbol(const char* name) {
  static void* const lib = dlopen("libnvrtc.so.13", RTLD_NOW | RTLD_LOCAL);
  return lib ? dlsym(lib, name) : nullptr;
}

}  // namespace

CudnnLibrary load_cudnn(const std::string& lib) {
  std::lock_guard<std::mutex> lock(g_load_mutex);
  const std::string name = lib.empty() ? "libcudnn.so.9" : lib;
  if (g_loaded.loaded) {
    if (lib.empty() || lib == g_loaded.path) return g_loaded;
    return failure(name, g_loaded.path + " is already loaded in this process; cannot load " + name +
                             " beside it");
  }
  dlerror();
  void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* why = dlerror();
    return failure(name, "cannot load " + name + " (" + (why ? why : "unknown error") +
                             "); name the library with --cudnn-lib or put its directory on "
                             "LD_LIBRARY_PATH");
  }
  void* found[ENTRY_COUNT];
  for (int i = 0; i < ENTRY_COUNT; ++i) {
    found[i] = dlsym(h, ENTRY_NAMES[i]);
    if (found[i] == nullptr && i < FIRST_OPTIONAL) {
      dlclose(h);
      return failure(name, name + " has no " + ENTRY_NAMES[i]);
    }
  }
  const int version =
      static_cast<int>(reinterpret_cast<decltype(&cudnnGetVersion)>(found[e_cudnnGetVersion])());
  if (version < 90000) {
    dlclose(h);
    return failure(
        name, name + " is cuDNN " + cudnn_version_text(version) + "; the SDPA path needs cuDNN 9");
  }
  for (int i = 0; i < ENTRY_COUNT; ++i) g_entries[i].store(found[i], std::memory_order_release);
  g_loaded.loaded = true;
  g_loaded.version = version;
  g_loaded.path = name;
  return g_loaded;  // the library stays loaded for the process
}

}  // namespace megaops

// The forwarders (see the top of this file). Before a load: CUDNN_STATUS_NOT_INITIALIZED.
#define MEGAOPS_HIDDEN __attribute__((visibility("hidden")))
#define MEGAOPS_CUDNN_FORWARD(name, ...)                              \
  const auto fn = megaops::entry<decltype(&name)>(megaops::e_##name); \
  return fn ? fn(__VA_ARGS__) : CUDNN_STATUS_NOT_INITIALIZED

extern "C" {

MEGAOPS_HIDDEN size_t cudnnGetVersion(void) {
  const auto fn = megaops::entry<decltype(&cudnnGetVersion)>(megaops::e_cudnnGetVersion);
  return fn ? fn() : 0;
}

MEGAOPS_HIDDEN const char* cudnnGetErrorString(cudnnStatus_t status) {
  const auto fn = megaops::entry<decltype(&cudnnGetErrorString)>(megaops::e_cudnnGetErrorString);
  return fn ? fn(status) : "cuDNN is not loaded";
}

MEGAOPS_HIDDEN void cudnnGetLastErrorString(char* message, size_t max_size) {
  const auto fn =
      megaops::entry<decltype(&cudnnGetLastErrorString)>(megaops::e_cudnnGetLastErrorString);
  if (fn) {
    fn(message, max_size);
  } else if (message != nullptr && max_size > 0) {
    std::strncpy(message, "cuDNN is not loaded", max_size - 1);
    message[max_size - 1] = '\0';
  }
}

MEGAOPS_HIDDEN cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  MEGAOPS_CUDNN_FORWARD(cudnnCreate, handle);
}

MEGAOPS_HIDDEN cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  MEGAOPS_CUDNN_FORWARD(cudnnDestroy, handle);
}

MEGAOPS_HIDDEN cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  MEGAOPS_CUDNN_FORWARD(cudnnSetStream, handle, stream);
}

MEGAOPS_HIDDEN cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* stream) {
  MEGAOPS_CUDNN_FORWARD(cudnnGetStream, handle, stream);
}

MEGAOPS_HIDDEN cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                                          cudnnBackendDescriptor_t* descriptor) {
  MEGAOPS_CUDNN_FORWARD(cudnnBackendCreateDescriptor, type, descriptor);
}

MEGAOPS_HIDDEN cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
  MEGAOPS_CUDNN_FORWARD(cudnnBackendDestroyDescriptor, descriptor);
}

MEGAOPS_HIDDEN cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) {
  MEGAOPS_CUDNN_FORWARD(cudnnBackendFinalize, descriptor);
}

MEGAOPS_HIDDEN cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor,
                                                      cudnnBackendAttributeName_t name,
                                                      cudnnBackendAttributeType_t type,
                                                      int64_t count, const void* elements) {
  MEGAOPS_CUDNN_FORWARD(cudnnBackendSetAttribute, descriptor, name, type, count, elements);
}

MEGAOPS_HIDDEN cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
                                                      cudnnBackendAttributeName_t name,
                                                      cudnnBackendAttributeType_t type,
                                                      int64_t requested, int64_t* count,
                                                      void* elements) {
  MEGAOPS_CUDNN_FORWARD(cudnnBackendGetAttribute, descriptor, name, type, requested, count,
                        elements);
}

MEGAOPS_HIDDEN cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle,
                                                 cudnnBackendDescriptor_t plan,
                                                 cudnnBackendDescriptor_t variant_pack) {
  MEGAOPS_CUDNN_FORWARD(cudnnBackendExecute, handle, plan, variant_pack);
}

// Deprecated in cuDNN 9 (the frontend still references them).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

MEGAOPS_HIDDEN cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* desc) {
  MEGAOPS_CUDNN_FORWARD(cudnnCreateFilterDescriptor, desc);
}

MEGAOPS_HIDDEN cudnnStatus_t cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t desc,
                                                        cudnnDataType_t type,
                                                        cudnnTensorFormat_t format, int dims,
                                                        const int dim_sizes[]) {
  MEGAOPS_CUDNN_FORWARD(cudnnSetFilterNdDescriptor, desc, type, format, dims, dim_sizes);
}

MEGAOPS_HIDDEN cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t desc) {
  MEGAOPS_CUDNN_FORWARD(cudnnDestroyFilterDescriptor, desc);
}

MEGAOPS_HIDDEN cudnnStatus_t cudnnReorderFilterAndBias(cudnnHandle_t handle,
                                                       const cudnnFilterDescriptor_t desc,
                                                       cudnnReorderType_t type, const void* filter,
                                                       void* reordered_filter, int reorder_bias,
                                                       const void* bias, void* reordered_bias) {
  MEGAOPS_CUDNN_FORWARD(cudnnReorderFilterAndBias, handle, desc, type, filter, reordered_filter,
                        reorder_bias, bias, reordered_bias);
}

#pragma GCC diagnostic pop

#define MEGAOPS_NVRTC_FORWARD(name, ...)                                           \
  const auto fn = reinterpret_cast<decltype(&name)>(megaops::nvrtc_symbol(#name)); \
  return fn ? fn(__VA_ARGS__) : NVRTC_ERROR_INTERNAL_ERROR

MEGAOPS_HIDDEN nvrtcResult nvrtcCreateProgram(nvrtcProgram* prog, const char* src, const char* name,
                                              int num_headers, const char* const* headers,
                                              const char* const* include_names) {
  MEGAOPS_NVRTC_FORWARD(nvrtcCreateProgram, prog, src, name, num_headers, headers, include_names);
}

MEGAOPS_HIDDEN nvrtcResult nvrtcDestroyProgram(nvrtcProgram* prog) {
  MEGAOPS_NVRTC_FORWARD(nvrtcDestroyProgram, prog);
}

MEGAOPS_HIDDEN nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int num_options,
                                               const char* const* options) {
  MEGAOPS_NVRTC_FORWARD(nvrtcCompileProgram, prog, num_options, options);
}

MEGAOPS_HIDDEN nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t* size) {
  MEGAOPS_NVRTC_FORWARD(nvrtcGetProgramLogSize, prog, size);
}

MEGAOPS_HIDDEN nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char* log) {
  MEGAOPS_NVRTC_FORWARD(nvrtcGetProgramLog, prog, log);
}

MEGAOPS_HIDDEN nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t* size) {
  MEGAOPS_NVRTC_FORWARD(nvrtcGetCUBINSize, prog, size);
}

MEGAOPS_HIDDEN nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char* cubin) {
  MEGAOPS_NVRTC_FORWARD(nvrtcGetCUBIN, prog, cubin);
}

}  // extern "C"

#endif  // MEGAOPS_HAVE_CUDNN
