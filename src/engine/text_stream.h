// Generated tokens to streamed text, as vLLM's and llama.cpp's servers stream it: each token's
// text is released as soon as it is final. A UTF-8 character split across tokens waits for its
// last byte, text that could still grow into a stop string waits until it cannot (so a stop
// string is never emitted: the text ends before it), and special tokens are not printed. One per
// request; the engine feeds it every sampled token that is not an end-of-sequence token.
#pragma once

#include <string>
#include <vector>

#include "io/tokenizer.h"

namespace megaops {

class TextStream {
 public:
  // `stop` must hold no empty string (the engine refuses those when a request is added).
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop);

  // Takes the next token and returns the text that became final (possibly empty). Sets *stopped
  // when a stop string completed: the returned text then ends right before it and the stream is
  // done (later pushes return nothing).
  std::string push(int token, bool* stopped);
  // The end of the request (EOS, length, abort): releases what is held (an incomplete character
  // becomes U+FFFD, as the tokenizer decodes it). Nothing after a stop string.
  std::string finish();
  // Everything released so far.
  const std::string& text() const { return text_; }

 private:
  std::string release(bool final, bool* stopped);
  StreamDecoder decoder_;
  std::vector<std::string> stop_;
  size_t longest_stop_ = 0;
  std::string held_, text_;
  bool done_ = false;
};

}  // namespace megaops
