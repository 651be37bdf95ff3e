// Developer switches read from the environment (MEGAOPS_MATMUL_TUNE, MEGAOPS_STREAM_L2_EVICT_FIRST,
// MEGAOPS_GREEDY_IN_LM_HEAD, ...): one parser, so every one of them accepts the same values and
// rejects the rest with the same one-line error naming the variable.
#pragma once

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace megaops {

// Environment variable `name` as a 0|1 switch: `fallback` when unset or empty; InputError naming
// the variable and the value for anything else.
inline bool env_flag(const char* name, bool fallback) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return fallback;
  const std::string v = env;
  if (v != "0" && v != "1")
    throw InputError(std::string(name) + ": expected 0 or 1, found '" + v + "'");
  return v == "1";
}

}  // namespace megaops
