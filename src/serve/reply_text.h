// Text helpers the chat reply readers share (serve/tool_calls.h, serve/reasoning.h): skipping
// white space, and how much of a streamed piece's tail must wait because it may be the start of a
// marker such as <tool_call> or </think>.
#pragma once

#include <algorithm>
#include <string>

namespace megaops::serve {

// The first index at or after `i` that is not white space (s.size() if none).
inline size_t skip_space(const std::string& s, size_t i = 0) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  return i;
}

// The length of the longest suffix of `s` that is a proper prefix of `marker`.
inline size_t marker_tail(const std::string& s, const std::string& marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.compare(s.size() - n, n, marker, 0, n) == 0) return n;
  return 0;
}

}  // namespace megaops::serve
