// Host-side dtype conversions (see dtype.h).
#include "core/dtype.h"

#include <algorithm>
#include <cmath>

namespace megaops {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
  }
  return "?";
}

bool dtype_from_name(const std::string& name, DType* out) {
  if (name == "F32") {
    *out = DType::F32;
  } else if (name == "F16") {
    *out = DType::F16;
  } else if (name == "BF16") {
    *out = DType::BF16;
  } else {
    return false;
  }
  return true;
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: value = mant * 2^-24
      float f = std::ldexp(static_cast<float>(mant), -24);
      std::memcpy(&bits, &f, 4);
      bits |= sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // overflow (>= 65520 rounds to inf)
  if (abs < 0x38800000u) {                        // subnormal or zero in f16
    const float a = std::fabs(f);
    // value / 2^-24, rounded to nearest even
    const float scaled = a * 16777216.0f;
    const float r = std::nearbyint(scaled);
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
}

void to_float(DType t, const void* src, float* dst, size_t n) {
  if (t == DType::F32) {
    std::memcpy(dst, src, n * 4);
    return;
  }
  const auto* s = static_cast<const uint8_t*>(src);
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, s + 2 * i, 2);  // safetensors data need not be 2-byte aligned
    dst[i] = t == DType::BF16 ? bf16_to_float(h) : f16_to_float(h);
  }
}

size_t to_float_first_nonfinite(DType t, const void* src, float* dst, size_t n) {
  // Blocks small enough to stay in L1 between the conversion and the scan; the scan ORs exponent
  // tests without branching, so the common all-finite block costs one pass over 16 KB in cache.
  constexpr size_t BLOCK = 4096;
  const auto* s = static_cast<const uint8_t*>(src);
  const size_t esize = dtype_size(t);
  for (size_t b = 0; b < n; b += BLOCK) {
    const size_t m = std::min(BLOCK, n - b);
    to_float(t, s + b * esize, dst + b, m);
    uint32_t bad = 0;
    for (size_t i = 0; i < m; ++i) {
      uint32_t bits;
      std::memcpy(&bits, dst + b + i, 4);
      bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
    }
    if (bad)
      for (size_t i = 0; i < m; ++i)
        if (!std::isfinite(dst[b + i])) return b + i;
  }
  return n;
}

void from_float(DType t, const float* src, void* dst, size_t n) {
  if (t == DType::F32) {
    std::memcpy(dst, src, n * 4);
    return;
  }
  auto* d = static_cast<uint8_t*>(dst);
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = t == DType::BF16 ? float_to_bf16(src[i]) : float_to_f16(src[i]);
    std::memcpy(d + 2 * i, &h, 2);
  }
}

void round_to_bf16(float* data, size_t n) {
  for (size_t i = 0; i < n; ++i) data[i] = bf16_to_float(float_to_bf16(data[i]));
}

}  // namespace megaops
