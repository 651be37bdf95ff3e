// Opening and validating HF checkpoint directories, and writing random ones. Writing streams tensor
// by tensor (the header is known from shapes alone), so an 8B model in bf16 (16 GB) never has to
// sit in memory; values are counter-based, so generation splits across threads freely and a test
// can recompute any tensor without the file.
#include "models/checkpoint.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/parallel.h"
#include "io/json_describe.h"
#include "io/text_file.h"
#include "models/model_config.h"

namespace megaops {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* SINGLE_FILE = "model.safetensors";
constexpr const char* INDEX_FILE = "model.safetensors.index.json";

std::string join(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / name).string();
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool is_file(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

// weight_map of an index file: tensor name -> shard file name (relative to the directory).
std::map<std::string, std::string> read_weight_map(const std::string& path) {
  const std::string text = read_text_file(path);
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    throw_input_error(path, "", std::string("malformed JSON: ") + e.what());
  }
  if (!root.is_object() || !root.contains("weight_map") || !root["weight_map"].is_object()) {
    throw_input_error(path, "weight_map", "expected an object mapping tensor names to files");
  }
  std::map<std::string, std::string> out;
  for (const auto& [name, file] : root["weight_map"].items()) {
    if (!file.is_string()) {
      throw_input_error(path, "weight_map: " + name,
                        "expected a file name, found " + describe_json(file));
    }
    const std::string shard = file.get<std::string>();
    // Shards live next to the index; refuse paths that would read elsewhere.
    const fs::path p(shard);
    bool escapes = shard.empty() || p.is_absolute();
    for (const auto& part : p) escapes = escapes || part == "..";
    if (escapes) {
      throw_input_error(
          path, "weight_map: " + name,
          "expected a file name inside the checkpoint directory, found \"" + shard + "\"");
    }
    out[name] = shard;
  }
  return out;
}

size_t spec_numel(const WeightSpec& spec) {
  size_t n = 1;
  for (int64_t d : spec.shape) n *= static_cast<size_t>(d);
  return n;
}

// Writes one tensor's random values in `dtype` to `f`, generating and converting fixed-size blocks
// on all cores, one batch of blocks at a time, so memory stays at a few MB per thread.
void write_random_tensor(std::FILE* f, const std::string& path, const WeightSpec& spec,
                         uint32_t tensor_index, uint64_t seed, DType dtype, size_t* bytes_done,
                         size_t total_bytes, const std::function<void(size_t, size_t)>& progress) {
  constexpr size_t BLOCK = size_t{1} << 20;  // elements per thread per batch
  const size_t numel = spec_numel(spec);
  const size_t esize = dtype_size(dtype);
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t blocks_total = (numel + BLOCK - 1) / BLOCK;
  const size_t batch_blocks = std::min<size_t>(hw, std::max<size_t>(blocks_total, 1));
  std::vector<uint8_t> out(batch_blocks * BLOCK * esize);
  std::vector<std::vector<float>> scratch(batch_blocks);

  for (size_t first = 0; first < numel; first += batch_blocks * BLOCK) {
    const size_t batch_end = std::min(numel, first + batch_blocks * BLOCK);
    auto work = [&](size_t b) {
      const size_t begin = first + b * BLOCK;
      if (begin >= batch_end) return;
      const size_t count = std::min(BLOCK, batch_end - begin);
      scratch[b].resize(count);
      random_weight_values(spec, tensor_index, seed, begin, count, scratch[b].data());
      from_float(dtype, scratch[b].data(), out.data() + b * BLOCK * esize, count);
    };
    const size_t used = (batch_end - first + BLOCK - 1) / BLOCK;
    if (used == 1) {
      work(0);
    } else {
      std::vector<std::thread> threads;
      for (size_t b = 0; b < used; ++b) threads.emplace_back(work, b);
      for (auto& t : threads) t.join();
    }
    const size_t nbytes = (batch_end - first) * esize;
    if (std::fwrite(out.data(), 1, nbytes, f) != nbytes) {
      throw Error(path + ": write failed: " + std::strerror(errno));
    }
    *bytes_done += nbytes;
    if (progress) progress(*bytes_done, total_bytes);
  }
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw Error(path + ": write failed");
}

}  // namespace

Checkpoint Checkpoint::open(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw_input_error(dir, "", "expected a checkpoint directory, found none");
  }
  Checkpoint ckpt;
  ckpt.dir_ = dir;
  ckpt.config_ = read_model_config(join(dir, "config.json"));

  // Where each expected tensor is to be found. HF prefers the single file when both exist.
  std::map<std::string, const TensorView*> located;
  const std::string single = join(dir, SINGLE_FILE);
  const std::string index = join(dir, INDEX_FILE);
  if (is_file(single)) {
    ckpt.files_.push_back(SafetensorsFile::open(single));
    for (const TensorView& t : ckpt.files_.back()->tensors()) located[t.name] = &t;
  } else if (is_file(index)) {
    const auto weight_map = read_weight_map(index);
    std::map<std::string, const SafetensorsFile*> shards;
    for (const auto& [name, shard] : weight_map) {
      auto it = shards.find(shard);
      if (it == shards.end()) {
        const std::string shard_path = join(dir, shard);
        if (!is_file(shard_path)) {
          throw_input_error(index, "weight_map: " + name,
                            "shard " + shard + " is missing (expected " + shard_path + ")");
        }
        ckpt.files_.push_back(SafetensorsFile::open(shard_path));
        it = shards.emplace(shard, ckpt.files_.back().get()).first;
      }
      const TensorView* t = it->second->find(name);
      if (!t) {
        throw_input_error(it->second->path(), "tensor " + name,
                          "missing (listed in " + std::string(INDEX_FILE) + ")");
      }
      located[name] = t;
    }
  } else {
    throw_input_error(
        dir, "", std::string("expected ") + SINGLE_FILE + " or " + INDEX_FILE + ", found neither");
  }

  for (const WeightSpec& spec : expected_weights(ckpt.config_)) {
    auto it = located.find(spec.name);
    if (it == located.end()) throw_input_error(dir, "tensor " + spec.name, "missing");
    const TensorView& t = *it->second;
    if (t.shape != spec.shape) {
      throw_input_error(
          t.file, "tensor " + spec.name + ": shape",
          "expected " + shape_string(spec.shape) + ", found " + shape_string(t.shape));
    }
    ckpt.weights_.emplace_back(spec.name, &t);
  }
  std::sort(ckpt.weights_.begin(), ckpt.weights_.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return ckpt;
}

const TensorView& Checkpoint::weight(const std::string& name) const {
  auto it =
      std::lower_bound(weights_.begin(), weights_.end(), name,
                       [](const auto& entry, const std::string& n) { return entry.first < n; });
  if (it == weights_.end() || it->first != name) {
    throw_input_error(dir_, "tensor " + name,
                      std::string("not an expected weight of ") + arch_name(config_.arch) +
                          (config_.tie_word_embeddings ? " (tied embeddings)" : ""));
  }
  return *it->second;
}

void Checkpoint::weight_to_f32(const std::string& name, float* out) const {
  const TensorView& t = weight(name);
  const size_t n = t.numel();
  std::atomic<size_t> first_bad{n};
  parallel_for(n, size_t{1} << 20, [&](size_t b, size_t e) {
    const size_t local =
        to_float_first_nonfinite(t.dtype, t.data + b * dtype_size(t.dtype), out + b, e - b);
    if (local == e - b) return;  // all finite
    const size_t at = b + local;
    size_t seen = first_bad.load();
    while (at < seen && !first_bad.compare_exchange_weak(seen, at)) {
    }
  });
  const size_t bad = first_bad.load();
  if (bad == n) return;
  const float v = out[bad];
  std::string where = "index " + std::to_string(bad);
  if (t.shape.size() == 2)
    where += " (row " + std::to_string(bad / t.shape[1]) + ", column " +
             std::to_string(bad % t.shape[1]) + ")";
  throw_input_error(t.file, "tensor " + name,
                    std::string("expected finite values, found ") +
                        (std::isnan(v) ? "NaN"
                         : v > 0       ? "+Inf"
                                       : "-Inf") +
                        " at " + where);
}

std::vector<float> Checkpoint::weight_f32(const std::string& name) const {
  std::vector<float> out(weight(name).numel());
  weight_to_f32(name, out.data());
  return out;
}

WeightFiller checkpoint_filler(const Checkpoint& ckpt) {
  return [&ckpt](const WeightSpec& spec, size_t, float* out) {
    ckpt.weight_to_f32(spec.name, out);  // rejects NaN / Inf as it converts
  };
}

size_t Checkpoint::total_bytes() const {
  size_t total = 0;
  for (const auto& [name, t] : weights_) total += t->nbytes;
  return total;
}

void write_random_checkpoint(const ModelConfig& cfg, const std::string& dir, uint64_t seed,
                             DType dtype, size_t max_shard_bytes,
                             const std::function<void(size_t, size_t)>& progress) {
  validate_model_config(cfg, dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(dir + ": cannot create directory: " + ec.message());
  write_text_file(join(dir, "config.json"), model_config_to_json(cfg));

  const std::vector<WeightSpec> specs = expected_weights(cfg);
  std::vector<TensorToWrite> tensors;
  size_t total = 0;
  for (const WeightSpec& spec : specs) {
    const size_t nbytes = spec_numel(spec) * dtype_size(dtype);
    tensors.push_back({spec.name, dtype, spec.shape, nullptr, nbytes});
    total += nbytes;
  }

  // Greedy sharding in expected_weights order; 0 means one file whatever the size.
  std::vector<std::pair<size_t, size_t>> shards;  // [first, last) tensor indices
  if (max_shard_bytes == 0 || total <= max_shard_bytes) {
    shards.push_back({0, tensors.size()});
  } else {
    size_t first = 0, bytes = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (i > first && bytes + tensors[i].nbytes > max_shard_bytes) {
        shards.push_back({first, i});
        first = i;
        bytes = 0;
      }
      bytes += tensors[i].nbytes;
    }
    shards.push_back({first, tensors.size()});
  }

  // A stale file of the other layout would shadow (or contradict) what is written now.
  fs::remove(join(dir, shards.size() == 1 ? INDEX_FILE : SINGLE_FILE), ec);

  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  size_t bytes_done = 0;
  if (progress) progress(0, total);
  for (size_t s = 0; s < shards.size(); ++s) {
    std::string name = SINGLE_FILE;
    if (shards.size() > 1) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
      name = buf;
    }
    const auto [first, last] = shards[s];
    const std::vector<TensorToWrite> part(tensors.begin() + first, tensors.begin() + last);
    const std::string path = join(dir, name);
    const std::string partial = path + ".partial";
    std::FILE* f = std::fopen(partial.c_str(), "wb");
    if (!f) throw Error(partial + ": cannot create: " + std::strerror(errno));
    try {
      const std::string header = safetensors_header(part);
      if (std::fwrite(header.data(), 1, header.size(), f) != header.size()) {
        throw Error(partial + ": write failed: " + std::strerror(errno));
      }
      for (size_t i = first; i < last; ++i) {
        write_random_tensor(f, partial, specs[i], static_cast<uint32_t>(i), seed, dtype,
                            &bytes_done, total, progress);
        weight_map[specs[i].name] = name;
      }
    } catch (...) {
      std::fclose(f);
      fs::remove(partial, ec);
      throw;
    }
    if (std::fclose(f) != 0) throw Error(partial + ": write failed: " + std::strerror(errno));
    fs::rename(partial, path, ec);
    if (ec) throw Error(path + ": cannot rename from " + partial + ": " + ec.message());
  }

  if (shards.size() > 1) {
    nlohmann::ordered_json index;
    index["metadata"] = {{"total_size", total}};
    index["weight_map"] = std::move(weight_map);
    write_text_file(join(dir, INDEX_FILE), index.dump(2) + "\n");
  }
}

}  // namespace megaops
