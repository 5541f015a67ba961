// Tests of the HDF5 wrapper (core/hdf5.h): round trips of every supported dtype, vlen rows,
// attributes, atomic creation, lossless-only reads, and one-line InputErrors naming the file and key
// for missing, non-HDF5 and truncated files.
#include "core/hdf5.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/errors.h"
#include "input_error.h"
#include "temp_dir.h"

namespace bertperf::h5 {
namespace {

namespace fs = std::filesystem;

class Hdf5Test : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_ / name; }

  bertperf::testing::TempDir dir_{"bertperf_test_hdf5"};
};

using bertperf::testing::expect_input_error;

TEST_F(Hdf5Test, RoundTripsEveryDtypeShapeAndAttribute) {
  const std::string p = path("a.h5");
  const std::vector<float> f = {1.5f, -2.25f, 3e-8f, 7.0f, 0.0f, -1e30f};
  const std::vector<int8_t> i8 = {-128, 127, 0};
  const std::vector<int16_t> i16 = {-32768, 32767, 5, 6};
  const std::vector<int32_t> i32 = {-2147483647 - 1, 2147483647};
  const std::vector<int64_t> i64 = {INT64_MIN, INT64_MAX, 42};
  {
    File out = File::create(p);
    out.write("group/sub/floats", f, {2, 3});
    out.write("i8", i8, {3});
    out.write("i16", i16, {2, 2});
    out.write("i32", i32, {2});
    out.write("i64", i64, {3});
    out.set_attr("", "format", std::string("bertperf-test"));
    out.set_attr("/", "version", int64_t{7});
    out.set_attr("group/sub/floats", "note", std::string("unicode \xc3\xa9"));
    EXPECT_FALSE(fs::exists(p)) << "written in place instead of through a temporary";
    out.commit();
  }
  ASSERT_TRUE(fs::exists(p));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_.path), fs::directory_iterator()), 1) << "temporary left behind";

  File in = File::open(p);
  EXPECT_EQ(in.datasets(), (std::vector<std::string>{"group/sub/floats", "i16", "i32", "i64", "i8"}));
  EXPECT_TRUE(in.has("group/sub/floats"));
  EXPECT_TRUE(in.has("/group/sub"));
  EXPECT_FALSE(in.has("group/nothing/floats"));
  EXPECT_FALSE(in.has("i8/below_a_dataset"));
  const DatasetInfo fi = in.info("group/sub/floats");
  EXPECT_EQ(fi.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(fi.type, ElementType::F32);
  EXPECT_FALSE(fi.vlen);
  EXPECT_EQ(in.info("i16").type, ElementType::I16);
  EXPECT_EQ(in.read<float>("group/sub/floats"), f);
  EXPECT_EQ(in.read<int8_t>("i8"), i8);
  EXPECT_EQ(in.read<int16_t>("i16"), i16);
  EXPECT_EQ(in.read<int32_t>("i32"), i32);
  EXPECT_EQ(in.read<int64_t>("i64"), i64);
  // Widening reads are lossless and allowed.
  EXPECT_EQ(in.read<int64_t>("i8"), (std::vector<int64_t>{-128, 127, 0}));
  EXPECT_EQ(in.read<double>("group/sub/floats")[1], -2.25);
  EXPECT_EQ(in.attr_string("", "format"), "bertperf-test");
  EXPECT_EQ(in.attr_int("", "version"), 7);
  EXPECT_EQ(in.attr_string("group/sub/floats", "note"), "unicode \xc3\xa9");
  EXPECT_FALSE(in.has_attr("", "absent"));

  int16_t row[2];
  in.read_rows("i16", 1, 1, row);
  EXPECT_EQ(row[0], 5);
  EXPECT_EQ(row[1], 6);
}

TEST_F(Hdf5Test, VlenRowsRoundTripWholeAndRanges) {
  const std::string p = path("v.h5");
  Vlen<int16_t> rows;
  const int16_t r0[] = {101, 2023, 102};
  const int16_t r2[] = {-5, 30000, 7, 8, 9};
  rows.append(r0, 3);
  rows.append(nullptr, 0);  // an empty row is legal in h5py vlen data
  rows.append(r2, 5);
  {
    File out = File::create(p);
    out.write_vlen("input_ids", rows);
    out.commit();
  }
  File in = File::open(p);
  const DatasetInfo info = in.info("input_ids");
  EXPECT_TRUE(info.vlen);
  EXPECT_EQ(info.type, ElementType::I16);
  EXPECT_EQ(info.shape, (std::vector<int64_t>{3}));
  const Vlen<int32_t> all = in.read_vlen<int32_t>("input_ids");
  ASSERT_EQ(all.rows(), 3u);
  EXPECT_EQ(std::vector<int32_t>(all.row(0), all.row(0) + 3), (std::vector<int32_t>{101, 2023, 102}));
  EXPECT_EQ(all.row_size(1), 0u);
  EXPECT_EQ(std::vector<int32_t>(all.row(2), all.row(2) + 5), (std::vector<int32_t>{-5, 30000, 7, 8, 9}));
  const Vlen<int16_t> tail = in.read_vlen<int16_t>("input_ids", 2, 1);
  ASSERT_EQ(tail.rows(), 1u);
  EXPECT_EQ(tail.values, (std::vector<int16_t>{-5, 30000, 7, 8, 9}));
  expect_input_error([&] { in.read_vlen<int16_t>("input_ids", 2, 2); }, {p, "input_ids", "out of range"});
  expect_input_error([&] { in.read<int16_t>("input_ids"); }, {p, "input_ids", "variable-length"});
}

TEST_F(Hdf5Test, RefusesLossyReadsAndWrongCountsNamingFileAndKey) {
  const std::string p = path("l.h5");
  {
    File out = File::create(p);
    out.write("wide", std::vector<int32_t>{1, 2, 3}, {3});
    out.write("double", std::vector<double>{0.1}, {1});
    out.commit();
  }
  File in = File::open(p);
  expect_input_error([&] { in.read<int16_t>("wide"); }, {p, "'wide'", "int32", "int16"});
  expect_input_error([&] { in.read<float>("double"); }, {p, "'double'", "float64", "float32"});
  expect_input_error([&] { in.read<float>("wide"); }, {p, "'wide'", "int32", "float32"});
  std::vector<int32_t> four(4);
  expect_input_error([&] { in.read_into("wide", four.data(), 4); }, {p, "'wide'", "[3]"});
  expect_input_error([&] { in.read<float>("missing/key"); }, {p, "missing/key", "no such dataset"});
  expect_input_error([&] { in.attr_int("", "version"); }, {p, "version"});
}

TEST_F(Hdf5Test, BadFilesGiveOneLineNamingTheFile) {
  expect_input_error([&] { File::open(path("none.h5")); }, {path("none.h5"), "no such file"});
  expect_input_error([&] { File::open(dir_.path.string()); }, {dir_.path.string(), "directory"});

  const std::string text = path("text.h5");
  std::ofstream(text) << "this is not an HDF5 file\n";
  expect_input_error([&] { File::open(text); }, {text, "not an HDF5 file"});

  // A real file cut short: the signature survives, so the failure comes later and must still be
  // an InputError naming the file.
  const std::string good = path("good.h5");
  {
    File out = File::create(good);
    std::vector<float> big(20000, 1.0f);
    out.write("bert/embeddings/word_embeddings", big, {200, 100});
    out.commit();
  }
  const std::string cut = path("cut.h5");
  fs::copy_file(good, cut);
  fs::resize_file(cut, fs::file_size(good) / 2);
  try {
    File in = File::open(cut);
    std::vector<float> dst(20000);
    in.read_into("bert/embeddings/word_embeddings", dst.data(), dst.size());
    FAIL() << "a truncated file read without error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(cut), std::string::npos) << e.what();
  }

  expect_input_error([&] { File::create(path("no/such/dir/x.h5")); }, {"no/such/dir/x.h5", "cannot create"});
}

TEST_F(Hdf5Test, UncommittedFileLeavesNothingBehind) {
  const std::string p = path("abandoned.h5");
  {
    File out = File::create(p);
    out.write("x", std::vector<float>{1.0f}, {1});
  }
  EXPECT_FALSE(fs::exists(p));
  EXPECT_TRUE(fs::is_empty(dir_.path));
}

// The same content written twice, more than a second apart, gives the same bytes: HDF5 would
// otherwise stamp every group and dataset with its creation time.
TEST_F(Hdf5Test, SameContentGivesSameBytes) {
  auto write = [&](const std::string& name) {
    File out = File::create(path(name));
    out.write("bert/encoder/layer_0/attention/kernel", std::vector<float>{1.5f, -2.0f}, {2});
    out.write("bert/embeddings/word", std::vector<double>{3.0}, {1});
    out.write("top", std::vector<int32_t>{7}, {1});
    Vlen<int16_t> rows;
    const int16_t row[] = {1, 2, 3};
    rows.append(row, 3);
    out.write_vlen("data/rows", rows);
    out.set_attr("bert", "note", "x");
    out.commit();
    std::ifstream in(path(name), std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string first = write("a.h5");
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  const std::string second = write("b.h5");
  ASSERT_FALSE(first.empty());
  EXPECT_TRUE(first == second) << "the two files differ";
}

}  // namespace
}  // namespace bertperf::h5
