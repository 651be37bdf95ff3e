// A minimal parallel-for over [0, n) in contiguous slices, one std::thread per hardware thread.
// Used for host-side weight generation and conversion (an 8B model is 8e9 values).
#pragma once

#include <algorithm>
#include <cstddef>
#include <thread>
#include <vector>

namespace megaops {

// Calls fn(begin, end) on disjoint slices covering [0, n). Slices are at least `grain` long.
template <typename Fn>
void parallel_for(size_t n, size_t grain, Fn fn) {
  const size_t hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t slices = std::min(hw, std::max<size_t>(1, n / std::max<size_t>(grain, 1)));
  if (slices <= 1) {
    fn(size_t{0}, n);
    return;
  }
  std::vector<std::thread> threads;
  const size_t per = (n + slices - 1) / slices;
  for (size_t s = 0; s < slices; ++s) {
    const size_t b = s * per, e = std::min(n, b + per);
    if (b < e) threads.emplace_back([=] { fn(b, e); });
  }
  for (auto& t : threads) t.join();
}

}  // namespace megaops
