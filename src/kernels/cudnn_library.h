// cuDNN, loaded at run time. The binaries do not link libcudnn (too large to travel with them,
// and absent on many machines): load_cudnn dlopens it once per process and resolves the entry
// points the cudnn-frontend graph API calls (cudnnCreate, cudnnBackend*, ...). This file's .cpp
// defines those entry points as forwarders into the loaded library, hidden inside megaops' own
// binaries, so the frontend's headers compile as if cuDNN were linked and every call lands in
// the library load_cudnn chose; before a successful load each returns
// CUDNN_STATUS_NOT_INITIALIZED. The few NVRTC entry points the frontend's headers reference (its
// Blackwell-only engines) are forwarded the same way, into libnvrtc.so.13 loaded on first use.
// Plain C++.
#pragma once

#include <string>

namespace megaops {

struct CudnnLibrary {
  bool loaded = false;
  int version = 0;    // cudnnGetVersion(): major * 10000 + minor * 100 + patch (cuDNN 9)
  std::string path;   // as given to dlopen
  std::string error;  // one line: why not loaded
};

// The cuDNN library `lib` (a file name for the loader's search path, or a path; empty:
// libcudnn.so.9), loaded once per process; thread-safe. Needs cuDNN 9 and every entry point the
// frontend calls. A failed load may be retried (with another name); once one succeeded, a call
// naming another library gets an error naming both (the entry points are process-wide).
CudnnLibrary load_cudnn(const std::string& lib);

// "9.19.0" for 91900.
std::string cudnn_version_text(int version);

}  // namespace megaops
