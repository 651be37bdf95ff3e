// See wav.h. The header is the canonical 44-byte PCM layout with a float format tag (plus the
// empty extension size field WAVE_FORMAT_IEEE_FLOAT asks for, and a fact chunk): 58 bytes.
#include "io/wav.h"

#include <cstring>
#include <limits>

#include "core/error.h"
#include "io/text_file.h"

namespace megaops {

namespace {

constexpr uint32_t HEADER_BYTES = 58;

void put16(std::vector<uint8_t>& b, uint16_t v) {
  b.push_back(v & 0xff);
  b.push_back(v >> 8);
}
void put32(std::vector<uint8_t>& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back((v >> (8 * i)) & 0xff);
}
void tag(std::vector<uint8_t>& b, const char* t) {
  b.insert(b.end(), t, t + 4);
}
uint32_t get32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
  return v;
}
uint16_t get16(const std::string& s, size_t at) {
  return static_cast<uint16_t>(static_cast<uint8_t>(s[at]) | static_cast<uint8_t>(s[at + 1]) << 8);
}

}  // namespace

WavWriter::WavWriter(const std::string& path, int sample_rate)
    : path_(path), sample_rate_(sample_rate) {
  if (sample_rate < 1)
    throw_input_error(path, "sample rate", "expected >= 1, found " + std::to_string(sample_rate));
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_) throw_input_error(path, "", "cannot create the WAV file");
  write_header();
}

WavWriter::~WavWriter() {
  if (f_) std::fclose(f_);
}

void WavWriter::write_header() {
  const uint64_t data = samples_ * 4;
  std::vector<uint8_t> h;
  tag(h, "RIFF");
  put32(h, static_cast<uint32_t>(HEADER_BYTES - 8 + data));
  tag(h, "WAVE");
  tag(h, "fmt ");
  put32(h, 18);
  put16(h, 3);  // WAVE_FORMAT_IEEE_FLOAT
  put16(h, 1);  // mono
  put32(h, static_cast<uint32_t>(sample_rate_));
  put32(h, static_cast<uint32_t>(sample_rate_) * 4);
  put16(h, 4);   // block align
  put16(h, 32);  // bits per sample
  put16(h, 0);   // extension size
  tag(h, "fact");
  put32(h, 4);
  put32(h, static_cast<uint32_t>(samples_));
  tag(h, "data");
  put32(h, static_cast<uint32_t>(data));
  if (std::fseek(f_, 0, SEEK_SET) != 0 || std::fwrite(h.data(), 1, h.size(), f_) != h.size() ||
      std::fseek(f_, 0, SEEK_END) != 0 || std::fflush(f_) != 0)
    throw Error(path_ + ": writing the WAV header failed");
}

void WavWriter::append(const float* samples, size_t n) {
  if (!f_) throw Error(path_ + ": the WAV file is closed");
  if ((samples_ + n) * 4 + HEADER_BYTES > std::numeric_limits<uint32_t>::max())
    throw Error(path_ + ": a WAV file holds at most 4 GiB of samples");
  static_assert(sizeof(float) == 4, "IEEE float samples");
  if (n > 0 && std::fwrite(samples, sizeof(float), n, f_) != n)
    throw Error(path_ + ": writing samples failed");
  samples_ += n;
  write_header();
}

void WavWriter::close() {
  if (f_ && std::fclose(f_) != 0) {
    f_ = nullptr;
    throw Error(path_ + ": closing the WAV file failed");
  }
  f_ = nullptr;
}

WavData read_wav_f32(const std::string& path) {
  const std::string s = read_text_file(path);
  auto bad = [&](const std::string& what) { throw_input_error(path, "", what); };
  if (s.size() < 12 || s.compare(0, 4, "RIFF") != 0 || s.compare(8, 4, "WAVE") != 0)
    bad("expected a RIFF/WAVE file");
  WavData out;
  bool fmt = false;
  for (size_t at = 12; at + 8 <= s.size();) {
    const std::string id = s.substr(at, 4);
    const uint32_t len = get32(s, at + 4);
    if (at + 8 + len > s.size()) bad("chunk '" + id + "' runs past the end of the file");
    if (id == "fmt ") {
      if (len < 16 || get16(s, at + 8) != 3 || get16(s, at + 10) != 1 || get16(s, at + 22) != 32)
        bad("expected IEEE float 32-bit mono samples");
      out.sample_rate = static_cast<int>(get32(s, at + 12));
      fmt = true;
    } else if (id == "data") {
      if (!fmt) bad("data before the fmt chunk");
      out.samples.resize(len / 4);
      std::memcpy(out.samples.data(), s.data() + at + 8, out.samples.size() * 4);
      return out;
    }
    at += 8 + len + (len & 1);
  }
  throw_input_error(path, "", "no data chunk");
}

}  // namespace megaops
