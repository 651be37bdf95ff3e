// One request's state inside the engine (internal to src/engine): its tokens, how many of them
// the KV cache holds, its blocks, its text stream and its clocks.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/block_manager.h"
#include "engine/text_stream.h"
#include "megaops/engine.h"

namespace megaops {

using EngineClock = std::chrono::steady_clock;

struct Request {
  enum class State { Waiting, Running, Finished };

  uint64_t id = 0;
  std::vector<int> prompt, output;
  RequestParams params;
  std::unique_ptr<TextStream> text;  // null without a tokenizer
  State state = State::Waiting;
  int num_computed = 0;         // tokens (prompt, then output) whose K/V the cache holds
  std::vector<int32_t> blocks;  // the request's block table
  PrefixChain prefix;           // its leading blocks in the prefix cache (engine/block_manager.h)
  EngineClock::time_point arrival, last_token;
  double ttft_s = -1;
  int preemptions = 0;
  int cached_tokens = 0;  // from the prefix cache at its (last) admission

  // Penalties (RequestParams): how often each id was generated, and the prompt's ids.
  std::unordered_map<int, int> output_counts;
  std::unordered_set<int> prompt_ids;

  int num_tokens() const { return static_cast<int>(prompt.size() + output.size()); }
  int token_at(int i) const {
    const int p = static_cast<int>(prompt.size());
    return i < p ? prompt[i] : output[i - p];
  }
};

}  // namespace megaops
