// See text_stream.h.
#include "engine/text_stream.h"

#include <algorithm>

namespace megaops {

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop)
    : decoder_(tokenizer, /*skip_special_tokens=*/true), stop_(std::move(stop)) {
  for (const std::string& s : stop_) longest_stop_ = std::max(longest_stop_, s.size());
}

// Releases all but the tail that could still grow into a stop string; cuts at a stop string.
std::string TextStream::release(bool final, bool* stopped) {
  size_t cut = std::string::npos;
  for (const std::string& s : stop_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    held_.resize(cut);
    final = true;
    done_ = true;
    if (stopped) *stopped = true;
  }
  size_t keep = final || longest_stop_ == 0 ? 0 : std::min(held_.size(), longest_stop_ - 1);
  // Never split a UTF-8 character between two releases.
  while (keep > 0 && keep < held_.size() &&
         (static_cast<unsigned char>(held_[held_.size() - keep]) & 0xC0) == 0x80)
    ++keep;
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  text_ += out;
  return out;
}

std::string TextStream::push(int token, bool* stopped) {
  if (stopped) *stopped = false;
  if (done_) return {};
  held_ += decoder_.push(token);
  return release(false, stopped);
}

std::string TextStream::finish() {
  if (done_) return {};
  held_ += decoder_.finish();
  std::string out = release(true, nullptr);
  done_ = true;
  return out;
}

}  // namespace megaops
