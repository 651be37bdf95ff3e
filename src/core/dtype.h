// Element types megaops reads from checkpoints and uses on the device, with exact host-side
// conversions (round to nearest even), so the CPU oracle and the file writer agree bit for bit
// with what the GPU kernels see.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace megaops {

enum class DType { F32, F16, BF16 };

// Bytes per element.
inline size_t dtype_size(DType t) {
  return t == DType::F32 ? 4 : 2;
}

// The safetensors spelling: "F32", "F16", "BF16".
const char* dtype_name(DType t);

// Parses a safetensors dtype string; returns false for anything megaops does not support.
bool dtype_from_name(const std::string& name, DType* out);

inline float bf16_to_float(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even; NaN stays a quiet NaN.
inline uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_float(uint16_t h);
uint16_t float_to_f16(float f);

// Converts n elements of type t at src to float.
void to_float(DType t, const void* src, float* dst, size_t n);

// to_float, and the index of the first converted value that is NaN or +-Inf (n if none), found in
// the same pass while each block of output is still in cache (weights are checked as they load).
size_t to_float_first_nonfinite(DType t, const void* src, float* dst, size_t n);

// Converts n floats to type t (rounded to nearest even).
void from_float(DType t, const float* src, void* dst, size_t n);

// Rounds each value through bf16 and back: what a bf16 tensor on the GPU will hold.
void round_to_bf16(float* data, size_t n);

}  // namespace megaops
