// WAV files of float samples: a writer that appends samples as they are published and keeps the
// file a complete WAV after every append (its sizes are rewritten), so a reader may play it while
// it grows; and a reader for tests. Format: RIFF/WAVE, IEEE float 32-bit (format tag 3), mono,
// little-endian.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace megaops {

class WavWriter {
 public:
  // Creates (or replaces) `path` with a header of zero samples. Throws InputError naming the path
  // when it cannot be written, or on a sample rate outside 1..2^31-1.
  WavWriter(const std::string& path, int sample_rate);
  ~WavWriter();
  WavWriter(const WavWriter&) = delete;
  WavWriter& operator=(const WavWriter&) = delete;

  // Appends samples and rewrites the header's sizes; flushed before it returns. Throws Error on a
  // failed write or when the file would pass 4 GiB.
  void append(const float* samples, size_t n);
  // Closes the file (also done by the destructor, which never throws).
  void close();

  uint64_t samples() const { return samples_; }

 private:
  void write_header();
  std::string path_;
  std::FILE* f_ = nullptr;
  int sample_rate_;
  uint64_t samples_ = 0;
};

struct WavData {
  int sample_rate = 0;
  std::vector<float> samples;
};

// Reads a WAV file this writer wrote (IEEE float 32-bit mono); InputError naming the path and
// what is wrong otherwise.
WavData read_wav_f32(const std::string& path);

}  // namespace megaops
