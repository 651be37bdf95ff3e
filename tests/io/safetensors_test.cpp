// safetensors reader/writer: round trips in every supported dtype, and the catalogue of malformed
// files, each of which must be an InputError naming the file and the offending field.
#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_util.h"

namespace megaops {
namespace {

namespace fs = std::filesystem;

std::string make_temp_dir() {
  std::string tmpl = ::testing::TempDir() + "megaops_st_XXXXXX";
  char* made = ::mkdtemp(tmpl.data());
  if (!made) throw std::runtime_error("mkdtemp failed");
  return made;
}

using megaops::testing::expect_input_error;

// 8-byte little-endian length + header text + data.
std::string raw_file(const std::string& header, const std::string& data,
                     uint64_t len_override = 0) {
  uint64_t len = len_override ? len_override : header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  return out + header + data;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir(); }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write_raw(const std::string& bytes, const std::string& name = "t.safetensors") {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  // Opens a raw file and expects the listed fragments plus the path in the error.
  void expect_open_error(const std::string& bytes, std::initializer_list<std::string> parts) {
    const std::string path = write_raw(bytes);
    std::vector<std::string> all(parts);
    all.push_back(path);
    expect_input_error([&] { SafetensorsFile::open(path); }, all, path);
  }

  std::string dir_;
};

TEST_F(SafetensorsTest, RoundTripAllDtypes) {
  std::vector<float> f32 = {1.5f, -2.25f, 3.0f, 0.0f, 1e-3f, -7.0f};
  std::vector<uint16_t> f16(6), bf16(4);
  from_float(DType::F16, f32.data(), f16.data(), 6);
  from_float(DType::BF16, f32.data(), bf16.data(), 4);
  std::vector<TensorToWrite> tensors = {
      {"a.f32", DType::F32, {2, 3}, f32.data(), 24},
      {"b.f16", DType::F16, {6}, f16.data(), 12},
      {"c.bf16", DType::BF16, {2, 1, 2}, bf16.data(), 8},
      {"d.empty", DType::F32, {0, 4}, nullptr, 0},
  };
  const std::string path = dir_ + "/rt.safetensors";
  write_safetensors(path, tensors);

  auto file = SafetensorsFile::open(path);
  ASSERT_EQ(file->tensors().size(), 4u);
  for (const TensorToWrite& w : tensors) {
    const TensorView* t = file->find(w.name);
    ASSERT_NE(t, nullptr) << w.name;
    EXPECT_EQ(t->dtype, w.dtype);
    EXPECT_EQ(t->shape, w.shape);
    EXPECT_EQ(t->nbytes, w.nbytes);
    EXPECT_EQ(t->file, path);
    if (w.nbytes) {
      EXPECT_EQ(std::memcmp(t->data, w.data, w.nbytes), 0) << w.name;
    }
  }
  EXPECT_EQ(file->find("nope"), nullptr);
  EXPECT_EQ(file->find("c.bf16")->numel(), 4u);

  // Header padded to a multiple of 8 so data is 8-byte aligned, and tensors laid out in order.
  std::ifstream in(path, std::ios::binary);
  uint64_t len = 0;
  in.read(reinterpret_cast<char*>(&len), 8);
  EXPECT_EQ(len % 8, 0u);
  EXPECT_EQ(file->find("b.f16")->data, file->find("a.f32")->data + 24);
  EXPECT_EQ(fs::file_size(path), 8 + len + 44);
}

TEST_F(SafetensorsTest, MetadataObjectOfStringsAccepted) {
  const std::string h =
      R"({"__metadata__":{"format":"pt"},"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  auto file = SafetensorsFile::open(write_raw(raw_file(h, std::string(4, '\0'))));
  EXPECT_EQ(file->tensors().size(), 1u);
}

TEST_F(SafetensorsTest, EmptyFile) {
  expect_open_error("", {"header length", "at least 8 bytes, found 0"});
}

TEST_F(SafetensorsTest, TruncatedHeader) {
  expect_open_error(raw_file("{}", "", 1000), {"header length", "expected <= 2", "found 1000"});
}

TEST_F(SafetensorsTest, HugeHeaderLengthDoesNotWrap) {
  expect_open_error(raw_file("{}", "", ~uint64_t{0}),
                    {"header length", "found 18446744073709551615"});
}

TEST_F(SafetensorsTest, HeaderNotJson) {
  expect_open_error(raw_file("{\"x\": ", ""), {"header", "malformed JSON"});
}

TEST_F(SafetensorsTest, HeaderNotObject) {
  expect_open_error(raw_file("[1, 2]", ""), {"header", "expected a JSON object, found [1,2]"});
}

TEST_F(SafetensorsTest, HeaderInvalidUtf8) {
  expect_open_error(raw_file("{\"\xff\": 1}", ""), {"header", "malformed JSON"});
}

// Regression: error messages used to dump() the offending value, which recursed once per level.
TEST_F(SafetensorsTest, DeeplyNestedHeaderIsAnErrorNotAStackOverflow) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  expect_open_error(raw_file(deep, ""), {"header", "expected a JSON object, found [[[[...]]]]"});
  std::string tensor = "{\"w\":";
  for (int i = 0; i < 100000; ++i) tensor += "{\"a\":";
  tensor += "1" + std::string(100001, '}');
  expect_open_error(raw_file(tensor, ""), {"tensor w: dtype", "missing"});
  const std::string shape = R"({"w":{"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,0]}})";
  expect_open_error(raw_file(shape, ""), {"tensor w: shape"});
}

TEST_F(SafetensorsTest, MetadataNotStrings) {
  expect_open_error(raw_file(R"({"__metadata__":{"n":1}})", ""),
                    {"__metadata__", "object of strings"});
}

TEST_F(SafetensorsTest, OffsetsOutOfRange) {
  const std::string h = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[4,20]}})";
  expect_open_error(raw_file(h, std::string(16, '\0')),
                    {"tensor w: data_offsets", "expected end <= 16, found 20"});
}

TEST_F(SafetensorsTest, OffsetsReversed) {
  const std::string h = R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})";
  expect_open_error(raw_file(h, std::string(16, '\0')), {"tensor w: data_offsets", "begin <= end"});
}

TEST_F(SafetensorsTest, OffsetsDisagreeWithShape) {
  const std::string h = R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,8]}})";
  expect_open_error(raw_file(h, std::string(16, '\0')),
                    {"tensor w: data_offsets", "expected 12 bytes (BF16 [2, 3]), found 8"});
}

TEST_F(SafetensorsTest, OverlappingOffsets) {
  const std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  expect_open_error(
      raw_file(h, std::string(16, '\0')),
      {"tensor b: data_offsets", "overlaps tensor a", "expected begin >= 8, found 4"});
}

TEST_F(SafetensorsTest, EmptyTensorInsideAnotherIsNotAnOverlap) {
  const std::string h = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                        R"("b":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})";
  EXPECT_EQ(SafetensorsFile::open(write_raw(raw_file(h, std::string(16, '\0'))))->tensors().size(),
            2u);
}

TEST_F(SafetensorsTest, UnsupportedDtype) {
  const std::string h = R"({"ids":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})";
  expect_open_error(raw_file(h, std::string(8, '\0')), {"tensor ids", "dtype not supported: I64"});
}

TEST_F(SafetensorsTest, DuplicateTensor) {
  const std::string h = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                        R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  expect_open_error(raw_file(h, std::string(8, '\0')), {"header", "duplicate tensor w"});
}

TEST_F(SafetensorsTest, DuplicateKeyInsideEntry) {
  const std::string h = R"({"w":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})";
  expect_open_error(raw_file(h, std::string(8, '\0')), {"header", "duplicate key dtype"});
}

TEST_F(SafetensorsTest, NegativeShape) {
  const std::string h = R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})";
  expect_open_error(raw_file(h, std::string(8, '\0')),
                    {"tensor w: shape", "expected non-negative integer, found -1"});
}

TEST_F(SafetensorsTest, ShapeOverflow) {
  const std::string h =
      R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})";
  expect_open_error(raw_file(h, ""), {"tensor w: shape", "overflows"});
  // numel fits in 64 bits but numel * 4 does not.
  const std::string h2 =
      R"({"w":{"dtype":"F32","shape":[4611686018427387905],"data_offsets":[0,4]}})";
  expect_open_error(raw_file(h2, std::string(4, '\0')), {"tensor w: shape", "overflows"});
}

TEST_F(SafetensorsTest, MissingFields) {
  expect_open_error(raw_file(R"({"w":{"dtype":"F32","shape":[1]}})", ""),
                    {"tensor w: data_offsets", "missing"});
  expect_open_error(raw_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", ""),
                    {"tensor w: data_offsets", "expected [begin, end]"});
  expect_open_error(raw_file(R"({"w":3})", ""), {"tensor w", "expected an object"});
}

TEST_F(SafetensorsTest, MissingFile) {
  expect_input_error([&] { SafetensorsFile::open(dir_ + "/absent.safetensors"); },
                     {dir_ + "/absent.safetensors", "cannot open"});
}

TEST_F(SafetensorsTest, ParseInMemoryNamesOrigin) {
  const std::string bytes = raw_file("{}", "");
  expect_input_error(
      [&] { parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), 5, "mem"); },
      {"mem: header length"});
  EXPECT_TRUE(parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "mem")
                  .empty());
}

TEST_F(SafetensorsTest, WriterRejectsSizeMismatch) {
  float v = 0;
  EXPECT_THROW(write_safetensors(dir_ + "/bad.safetensors", {{"x", DType::F32, {2}, &v, 4}}),
               Error);
}

}  // namespace
}  // namespace megaops
