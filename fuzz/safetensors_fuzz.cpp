// libFuzzer target for the safetensors header parser: any byte string must either parse into
// in-bounds tensor views or raise InputError. Any other exception, crash or sanitizer report is a
// bug. Seed corpus: fuzz/corpus/safetensors/.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto tensors = megaops::parse_safetensors(data, size, "fuzz");
    // Touch first and last byte of each view so ASan flags any view that escapes the input.
    uint8_t sink = 0;
    for (const megaops::TensorView& t : tensors) {
      if (t.nbytes == 0) continue;
      if (t.data < data || t.data + t.nbytes > data + size) __builtin_trap();
      sink ^= t.data[0] ^ t.data[t.nbytes - 1];
      if (t.numel() * megaops::dtype_size(t.dtype) != t.nbytes) __builtin_trap();
    }
    volatile uint8_t keep = sink;
    (void)keep;
  } catch (const megaops::InputError&) {
  }
  return 0;
}
