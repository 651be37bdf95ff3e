// Reader and writer for the safetensors format: an 8-byte little-endian header length, a JSON
// header mapping tensor names to {dtype, shape, data_offsets}, then the raw data. The reader
// memory-maps the file and validates everything before any tensor is touched: header length within
// the file, JSON an object, dtypes supported, shapes non-negative, offsets in range, matching
// dtype x shape, not overlapping. Every failure is an InputError naming file and field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace megaops {

// A tensor inside a mapped file. `data` stays valid while the owning SafetensorsFile lives.
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // not necessarily aligned
  size_t nbytes = 0;
  std::string file;  // path of the file holding it, for error messages

  size_t numel() const;
};

// Parses and validates a safetensors header held in memory (the first `size` bytes of a file whose
// total size is `size`). Exposed separately so the fuzzer can drive it without a file. Returns the
// tensors with `data` pointing into `bytes`.
std::vector<TensorView> parse_safetensors(const uint8_t* bytes, size_t size,
                                          const std::string& origin);

// A memory-mapped, validated safetensors file.
class SafetensorsFile {
 public:
  // Throws InputError on a missing, unreadable, truncated or malformed file.
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }
  // nullptr when absent.
  const TensorView* find(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> index_;
};

// A tensor to write: name, dtype, shape and its raw bytes (dtype_size * numel of them).
struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
};

// The bytes that precede the data of a safetensors file holding `tensors` back to back in the given
// order: 8-byte length, then the JSON header padded with spaces to a multiple of 8. Only names,
// dtypes, shapes and nbytes are read (not `data`), so large files can be streamed tensor by tensor.
std::string safetensors_header(const std::vector<TensorToWrite>& tensors);

// Writes a safetensors file (header padded to 8 bytes, tensors in the given order, metadata
// {"format": "pt"}). Throws Error on I/O failure.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors);

}  // namespace megaops
