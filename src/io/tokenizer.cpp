// See tokenizer.h. The pipeline follows HF tokenizers' TokenizerImpl::encode: split on added
// tokens, normalize what is left, pre-tokenize, run the model on each piece, post-process.
// Everything works on raw bytes: the byte-level alphabet (GPT-2's bytes_to_unicode) only exists in
// the file's vocabulary and merges, which are translated back to bytes once at load.
#include "io/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <queue>

#include "io/tokenizer_impl.h"

namespace megaops {

using namespace tokenizer_detail;

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

// Splits `text` into runs of plain text (id -1) and added tokens (their id), leftmost-longest,
// with HF's single_word, lstrip and rstrip rules.
void Tokenizer::Impl::split_added(std::string_view text,
                                  const std::array<std::vector<int>, 256>& buckets,
                                  std::vector<std::pair<std::string_view, int>>* out) const {
  size_t plain_start = 0, i = 0;
  while (i < text.size()) {
    const auto& bucket = buckets[static_cast<unsigned char>(text[i])];
    int found = -1;
    size_t match_start = i, match_end = i;
    for (int k : bucket) {
      const AddedToken& t = added[k];
      if (text.compare(i, t.content.size(), t.content) != 0) continue;
      size_t end = i + t.content.size();
      if (t.single_word) {
        size_t before_start = 0;
        uint32_t after = 0;
        if (i > 0 && is_word_char(codepoint_before(text, i, &before_start))) continue;
        if (end < text.size() && utf8_sequence_length(text, end, &after) && is_word_char(after))
          continue;
      }
      size_t start = i;
      if (t.lstrip) {
        while (start > plain_start) {
          size_t prev = 0;
          if (!is_white_space(codepoint_before(text, start, &prev))) break;
          start = prev;
        }
      }
      if (t.rstrip) {
        uint32_t cp = 0;
        size_t n = 0;
        while (end < text.size() && (n = utf8_sequence_length(text, end, &cp)) &&
               is_white_space(cp))
          end += n;
      }
      found = added[k].id;
      match_start = start;
      match_end = end;
      break;
    }
    if (found < 0) {
      ++i;
      continue;
    }
    if (match_start > plain_start)
      out->emplace_back(text.substr(plain_start, match_start - plain_start), -1);
    out->emplace_back(text.substr(match_start, match_end - match_start), found);
    plain_start = i = match_end;
  }
  if (plain_start < text.size()) out->emplace_back(text.substr(plain_start), -1);
}

void Tokenizer::Impl::bpe(std::string_view piece, std::vector<int>* out) const {
  if (ignore_merges) {
    auto it = vocab_by_bytes.find(std::string(piece));
    if (it != vocab_by_bytes.end()) {
      out->push_back(it->second);
      return;
    }
  }
  // One symbol per byte; a byte missing from the vocabulary becomes unk, or is dropped (as HF does
  // without an unk token).
  struct Symbol {
    int id, prev, next;
    bool alive;
  };
  std::vector<Symbol> sym;
  sym.reserve(piece.size());
  for (unsigned char b : piece) {
    const int id = byte_id[b] >= 0 ? byte_id[b] : unk_id;
    if (id < 0) continue;
    const int n = static_cast<int>(sym.size());
    sym.push_back({id, n - 1, -1, true});
    if (n > 0) sym[n - 1].next = n;
  }
  if (sym.empty()) return;
  struct Merge {
    int rank, pos, new_id;
    bool operator>(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Merge, std::vector<Merge>, std::greater<Merge>> queue;
  const auto lookup = [&](int a, int b) -> const std::pair<int, int>* {
    auto it = merges.find((static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b));
    return it == merges.end() ? nullptr : &it->second;
  };
  for (size_t i = 0; i + 1 < sym.size(); ++i)
    if (const auto* m = lookup(sym[i].id, sym[i + 1].id))
      queue.push({m->first, static_cast<int>(i), m->second});
  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    Symbol& left = sym[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = sym[left.next];
    const auto* m = lookup(left.id, right.id);
    if (!m || m->second != top.new_id) continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) sym[left.next].prev = top.pos;
    if (left.prev >= 0)
      if (const auto* p = lookup(sym[left.prev].id, left.id))
        queue.push({p->first, left.prev, p->second});
    if (left.next >= 0)
      if (const auto* n = lookup(left.id, sym[left.next].id))
        queue.push({n->first, top.pos, n->second});
  }
  for (int i = 0; i >= 0; i = sym[i].next) out->push_back(sym[i].id);
}

void Tokenizer::Impl::encode_normalized(std::string_view text, std::vector<int>* out) const {
  std::vector<std::string> pieces{std::string(text)};
  std::vector<std::string> next;
  Pcre2MatchData md;
  for (const PreTokenizeStep& step : pre_steps) {
    next.clear();
    for (std::string& piece : pieces) {
      if (step.add_prefix_space && (piece.empty() || piece[0] != ' ')) piece.insert(0, " ");
      if (!step.regex) {
        next.push_back(std::move(piece));
        continue;
      }
      if (!md) md.reset(pcre2_match_data_create_from_pattern(step.regex.get(), nullptr));
      // Matches and the gaps between them, then grouped per the split behavior.
      std::vector<std::pair<std::string_view, bool>> parts;
      const std::string_view s = piece;
      size_t offset = 0, gap_start = 0;
      while (offset < s.size()) {
        const int rc = pcre2_match(step.regex.get(), reinterpret_cast<PCRE2_SPTR>(s.data()),
                                   s.size(), offset, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
        if (rc < 0) break;
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        const size_t start = ov[0], end = ov[1];
        if (end == start) {  // an empty match splits nothing; step over one character
          uint32_t cp = 0;
          offset = start + std::max<size_t>(1, utf8_sequence_length(s, start, &cp));
          continue;
        }
        if (start > gap_start) parts.emplace_back(s.substr(gap_start, start - gap_start), false);
        parts.emplace_back(s.substr(start, end - start), true);
        gap_start = offset = end;
      }
      if (gap_start < s.size()) parts.emplace_back(s.substr(gap_start), false);
      std::string pending;
      bool pending_is_match = false, have_pending = false;
      for (const auto& [text_part, is_match] : parts) {
        switch (step.behavior) {
          case SplitBehavior::Isolated:
            next.emplace_back(text_part);
            break;
          case SplitBehavior::Removed:
            if (!is_match) next.emplace_back(text_part);
            break;
          case SplitBehavior::MergedWithPrevious:
            if (is_match && !next.empty() && have_pending) {
              next.back() += text_part;
            } else {
              next.emplace_back(text_part);
            }
            have_pending = true;
            break;
          case SplitBehavior::MergedWithNext:
            if (is_match) {
              pending += text_part;
            } else {
              next.push_back(pending + std::string(text_part));
              pending.clear();
            }
            break;
          case SplitBehavior::Contiguous:
            if (is_match && have_pending && pending_is_match) {
              next.back() += text_part;
            } else {
              next.emplace_back(text_part);
            }
            have_pending = true;
            pending_is_match = is_match;
            break;
        }
      }
      if (!pending.empty()) next.push_back(std::move(pending));
    }
    pieces.swap(next);
  }
  for (const std::string& piece : pieces) {
    if (piece.empty()) continue;
    constexpr size_t CACHE_MAX_PIECE = 64, CACHE_MAX_ENTRIES = 100000;
    if (piece.size() <= CACHE_MAX_PIECE) {
      std::lock_guard<std::mutex> lock(cache_mutex);
      auto it = cache.find(piece);
      if (it != cache.end()) {
        out->insert(out->end(), it->second.begin(), it->second.end());
        continue;
      }
    }
    const size_t before = out->size();
    bpe(piece, out);
    if (piece.size() <= CACHE_MAX_PIECE) {
      std::lock_guard<std::mutex> lock(cache_mutex);
      if (cache.size() < CACHE_MAX_ENTRIES)
        cache.emplace(piece, std::vector<int>(out->begin() + before, out->end()));
    }
  }
}

std::vector<int> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const size_t n = utf8_sequence_length(text, i, &cp);
    if (n == 0) throw InputError("text: invalid UTF-8 at byte " + std::to_string(i));
    i += n;
  }
  const Impl& m = *impl_;
  std::vector<int> out;
  if (add_special_tokens) out = m.prefix_ids;
  std::vector<std::pair<std::string_view, int>> segments;
  m.split_added(text, m.raw_buckets, &segments);
  for (const auto& [segment, id] : segments) {
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    const std::string normalized = m.normalize_nfc ? nfc(segment) : std::string(segment);
    if (!m.has_normalized_added) {
      m.encode_normalized(normalized, &out);
      continue;
    }
    std::vector<std::pair<std::string_view, int>> inner;
    m.split_added(normalized, m.normalized_buckets, &inner);
    for (const auto& [part, part_id] : inner) {
      if (part_id >= 0) {
        out.push_back(part_id);
      } else {
        m.encode_normalized(part, &out);
      }
    }
  }
  if (add_special_tokens) out.insert(out.end(), m.suffix_ids.begin(), m.suffix_ids.end());
  return out;
}

std::string byte_level_spelling(std::string_view bytes) {
  static const std::array<uint32_t, 256> b2c = byte_to_codepoint();
  std::string out;
  for (unsigned char b : bytes) append_utf8(b2c[b], &out);
  return out;
}

size_t append_utf8_lossy(std::string_view bytes, bool hold_incomplete_tail, std::string* out) {
  static const char REPLACEMENT[] = "\xEF\xBF\xBD";
  size_t i = 0;
  while (i < bytes.size()) {
    uint32_t cp = 0;
    const size_t n = utf8_sequence_length(bytes, i, &cp);
    if (n) {
      out->append(bytes.substr(i, n));
      i += n;
      continue;
    }
    // The maximal subpart: the lead byte and the continuation bytes that are still valid for it.
    const unsigned char b0 = static_cast<unsigned char>(bytes[i]);
    size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      need = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      need = 3;
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      need = 4;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    }
    size_t k = 1;
    while (need && k < need && i + k < bytes.size()) {
      const unsigned char b = static_cast<unsigned char>(bytes[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) break;
      ++k;
    }
    if (need && k < need && i + k == bytes.size() && hold_incomplete_tail) return bytes.size() - i;
    out->append(REPLACEMENT);
    i += k;
  }
  return 0;
}

std::string Tokenizer::decode(const std::vector<int>& ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int id : ids) {
    if (skip_special_tokens && is_special(id)) continue;
    bytes += token_bytes(id);
  }
  std::string out;
  append_utf8_lossy(bytes, false, &out);
  return out;
}

std::string Tokenizer::token_bytes(int id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_bytes.size()) return {};
  return impl_->id_bytes[id];
}

std::optional<int> Tokenizer::token_id(std::string_view token) const {
  auto it = impl_->token_by_text.find(std::string(token));
  if (it == impl_->token_by_text.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::is_special(int id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->id_special.size() && impl_->id_special[id];
}

int Tokenizer::vocab_size() const {
  return static_cast<int>(impl_->id_bytes.size());
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const {
  return impl_->added;
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_(skip_special_tokens) {}

std::string StreamDecoder::push(int id) {
  if (skip_special_ && tokenizer_->is_special(id)) return {};
  pending_ += tokenizer_->token_bytes(id);
  std::string out;
  const size_t held = append_utf8_lossy(pending_, true, &out);
  pending_.erase(0, pending_.size() - held);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out;
  append_utf8_lossy(pending_, false, &out);
  pending_.clear();
  return out;
}

}  // namespace megaops
