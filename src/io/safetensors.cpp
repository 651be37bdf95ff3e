// safetensors reader (mmap + full header validation) and writer. The header is untrusted input:
// every size is checked for overflow and range before a pointer into the mapping is formed, so a
// malformed file produces an InputError and never an out-of-bounds read.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "io/json_describe.h"

namespace megaops {
namespace {

using nlohmann::json;

// Tensor names come from the file; keep control characters out of one-line messages.
std::string printable(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return out;
}

std::string describe(const json& v) {
  return describe_json(v);
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Parses the header JSON, rejecting duplicate keys in any object: nlohmann would silently keep the
// last one, and two entries for one tensor name make the file ambiguous.
json parse_header_json(const char* begin, const char* end, const std::string& origin) {
  std::vector<std::set<std::string>> keys_per_object;
  std::string duplicate;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        keys_per_object.emplace_back();
        break;
      case json::parse_event_t::object_end:
        keys_per_object.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys_per_object.back().insert(parsed.get<std::string>()).second && duplicate.empty()) {
          duplicate = (depth == 1 ? "duplicate tensor " : "duplicate key ") +
                      printable(parsed.get<std::string>());
        }
        break;
      default:
        break;
    }
    return true;
  };
  json root;
  try {
    root = json::parse(begin, end, callback);
  } catch (const json::exception& e) {
    std::string what = e.what();
    if (auto pos = what.find("] ");
        what.rfind("[json.exception", 0) == 0 && pos != std::string::npos) {
      what = what.substr(pos + 2);
    }
    throw_input_error(origin, "header", "malformed JSON: " + what);
  }
  if (!duplicate.empty()) throw_input_error(origin, "header", duplicate);
  return root;
}

// A non-negative integer from the header; rejects floats, negatives and strings.
uint64_t header_uint(const json& v, const std::string& origin, const std::string& field) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
    throw_input_error(origin, field, "expected non-negative integer, found " + describe(v));
  }
  return v.get<uint64_t>();
}

}  // namespace

size_t TensorView::numel() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

std::vector<TensorView> parse_safetensors(const uint8_t* bytes, size_t size,
                                          const std::string& origin) {
  if (size < 8) {
    throw_input_error(origin, "header length",
                      "expected a file of at least 8 bytes, found " + std::to_string(size));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > size - 8) {
    throw_input_error(origin, "header length",
                      "expected <= " + std::to_string(size - 8) + " (file size - 8), found " +
                          std::to_string(header_len));
  }
  const char* header = reinterpret_cast<const char*>(bytes + 8);
  const json root = parse_header_json(header, header + header_len, origin);
  if (!root.is_object()) {
    throw_input_error(origin, "header", "expected a JSON object, found " + describe(root));
  }

  const uint8_t* data = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  std::vector<TensorView> tensors;
  tensors.reserve(root.size());
  for (auto item = root.begin(); item != root.end(); ++item) {
    // Not a structured binding: clang 14 cannot capture those in the lambda below.
    const std::string& name = item.key();
    const json& entry = item.value();
    if (name == "__metadata__") {
      bool ok = entry.is_object();
      if (ok) {
        for (const auto& [k, v] : entry.items()) ok = ok && v.is_string();
      }
      if (!ok) {
        throw_input_error(origin, "__metadata__",
                          "expected an object of strings, found " + describe(entry));
      }
      continue;
    }
    const std::string where = "tensor " + printable(name);
    if (!entry.is_object()) {
      throw_input_error(origin, where, "expected an object, found " + describe(entry));
    }
    auto field = [&](const char* key) -> const json& {
      auto it = entry.find(key);
      if (it == entry.end()) throw_input_error(origin, where + ": " + key, "missing");
      return *it;
    };

    TensorView t;
    t.name = name;
    t.file = origin;
    const json& dtype = field("dtype");
    if (!dtype.is_string()) {
      throw_input_error(origin, where + ": dtype", "expected string, found " + describe(dtype));
    }
    if (!dtype_from_name(dtype.get<std::string>(), &t.dtype)) {
      throw_input_error(origin, where,
                        "dtype not supported: " + printable(dtype.get<std::string>()) +
                            " (supported: F32, F16, BF16)");
    }

    const json& shape = field("shape");
    if (!shape.is_array()) {
      throw_input_error(origin, where + ": shape", "expected array, found " + describe(shape));
    }
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& d : shape) {
      const uint64_t dim = header_uint(d, origin, where + ": shape");
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) overflow = true;
      if (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / dim) overflow = true;
      numel = overflow ? 0 : numel * dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const uint64_t elem = dtype_size(t.dtype);
    if (overflow || numel > std::numeric_limits<uint64_t>::max() / elem) {
      throw_input_error(origin, where + ": shape",
                        "element count overflows 64 bits, found " + describe(shape));
    }
    const uint64_t expected_bytes = numel * elem;

    const json& offsets = field("data_offsets");
    if (!offsets.is_array() || offsets.size() != 2) {
      throw_input_error(origin, where + ": data_offsets",
                        "expected [begin, end], found " + describe(offsets));
    }
    const uint64_t begin = header_uint(offsets[0], origin, where + ": data_offsets");
    const uint64_t end = header_uint(offsets[1], origin, where + ": data_offsets");
    if (begin > end) {
      throw_input_error(origin, where + ": data_offsets",
                        "expected begin <= end, found [" + std::to_string(begin) + ", " +
                            std::to_string(end) + "]");
    }
    if (end > data_size) {
      throw_input_error(
          origin, where + ": data_offsets",
          "expected end <= " + std::to_string(data_size) + ", found " + std::to_string(end));
    }
    if (end - begin != expected_bytes) {
      throw_input_error(origin, where + ": data_offsets",
                        "expected " + std::to_string(expected_bytes) + " bytes (" +
                            dtype_name(t.dtype) + " " + shape_string(t.shape) + "), found " +
                            std::to_string(end - begin));
    }
    t.data = data + begin;
    t.nbytes = static_cast<size_t>(expected_bytes);
    tensors.push_back(std::move(t));
  }

  // Overlap check on non-empty ranges sorted by start: each must begin at or after the previous
  // end.
  std::vector<const TensorView*> by_offset;
  for (const TensorView& t : tensors) {
    if (t.nbytes > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorView* a, const TensorView* b) { return a->data < b->data; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorView& prev = *by_offset[i - 1];
    const TensorView& cur = *by_offset[i];
    if (cur.data < prev.data + prev.nbytes) {
      throw_input_error(origin, "tensor " + printable(cur.name) + ": data_offsets",
                        "overlaps tensor " + printable(prev.name) + ": expected begin >= " +
                            std::to_string(prev.data + prev.nbytes - data) + ", found " +
                            std::to_string(cur.data - data));
    }
  }
  return tensors;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_input_error(path, "", std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_input_error(path, "", "not a regular file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    const uint8_t empty[8] = {};
    parse_safetensors(empty, size, path);  // throws the same message as for in-memory input
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (map == MAP_FAILED) {
    throw_input_error(path, "", std::string("cannot map: ") + std::strerror(map_errno));
  }
  file->map_ = map;
  file->map_size_ = size;
  file->tensors_ = parse_safetensors(static_cast<const uint8_t*>(map), size, path);
  for (size_t i = 0; i < file->tensors_.size(); ++i) file->index_[file->tensors_[i].name] = i;
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::string safetensors_header(const std::vector<TensorToWrite>& tensors) {
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    size_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) throw Error("safetensors writer: tensor " + t.name + ": negative dimension");
      numel *= static_cast<size_t>(d);
    }
    if (numel * dtype_size(t.dtype) != t.nbytes) {
      throw Error("safetensors writer: tensor " + t.name + ": expected " +
                  std::to_string(numel * dtype_size(t.dtype)) + " bytes, found " +
                  std::to_string(t.nbytes));
    }
    if (t.name == "__metadata__" || header.contains(t.name)) {
      throw Error("safetensors writer: duplicate or reserved tensor name " + t.name);
    }
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  std::string text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned (the length prefix is 8 bytes).
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  return out + text;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors) {
  const std::string header = safetensors_header(tensors);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error(path + ": cannot create: " + std::strerror(errno));
  bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();
  for (const TensorToWrite& t : tensors) {
    if (ok && t.nbytes > 0) ok = std::fwrite(t.data, 1, t.nbytes, f) == t.nbytes;
  }
  const int write_errno = errno;
  if (std::fclose(f) != 0) ok = false;
  if (!ok) throw Error(path + ": write failed: " + std::strerror(write_errno));
}

}  // namespace megaops
