// Hostile input: damaged shards, a full disk, too little data, configs built to break the loader. Each case that
// could crash or hang runs in a forked child with a time and memory limit, and must end in a clean exit or one
// InputError line (exit 2), never a signal, a hang, HDF5's own error dump or an out-of-memory.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <iostream>
#include <numeric>
#include <random>
#include <regex>
#include <sstream>

#include "core/errors.h"
#include "core/hdf5.h"
#include "core/json_fields.h"
#include "core/tensor_table.h"
#include "data/reader.h"
#include "harness/train_config.h"
#include "model/bert_params.h"
#include "model/checkpoint.h"
#include "synthetic_data.h"
#include "temp_dir.h"

namespace bertperf {
namespace {

using testing::TempDir;

struct ChildResult {
  bool exited = false;  // false: killed by a signal (a crash, or the time limit)
  int code = -1;
  int signal = 0;
  std::string err;      // what the child wrote to stderr
};

// Runs `body` in a forked child with stderr captured, `seconds` of CPU and wall time and `memory_bytes` of address
// space. The child exits 0 when `body` returns, 2 on InputError (its message on stderr, one line), 3 on
// std::bad_alloc, 4 on any other exception; exit() runs the libraries' exit handlers (HDF5 closes its files there).
ChildResult run_child(const std::function<void()>& body, unsigned seconds = 20, rlim_t memory_bytes = rlim_t{3} << 30,
                      const std::function<void()>& setup = {}) {
  char path[] = "/tmp/bertperf_child_XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  std::cout.flush();
  std::cerr.flush();
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fd, 2);
    alarm(seconds);
    const rlimit mem{memory_bytes, memory_bytes};
    setrlimit(RLIMIT_AS, &mem);
    if (setup) setup();
    int code = 0;
    try {
      body();
    } catch (const InputError& e) {
      std::cerr << e.what() << "\n";
      code = 2;
    } catch (const std::bad_alloc&) {
      std::cerr << "out of memory\n";
      code = 3;
    } catch (const std::exception& e) {
      std::cerr << "other exception: " << e.what() << "\n";
      code = 4;
    }
    std::cerr.flush();
    std::exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  close(fd);
  ChildResult r;
  r.exited = WIFEXITED(status);
  r.code = r.exited ? WEXITSTATUS(status) : -1;
  r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  r.err = text.str();
  unlink(path);
  return r;
}

int lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }

// A clean ending: success, or exactly one InputError line; never a signal, HDF5's dump or an out-of-memory.
void expect_clean(const ChildResult& r, const std::string& what) {
  EXPECT_TRUE(r.exited) << what << ": killed by signal " << r.signal << "; stderr: " << r.err.substr(0, 2000);
  EXPECT_TRUE(r.code == 0 || r.code == 2) << what << ": exit " << r.code << "; stderr: " << r.err.substr(0, 2000);
  EXPECT_EQ(r.err.find("HDF5-DIAG"), std::string::npos) << what << ": HDF5's error stack reached stderr";
  EXPECT_LE(lines(r.err), 1) << what << ": more than one line on stderr: " << r.err.substr(0, 2000);
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

// Reads a shard the way training does: the layout reader, then batches from the prefetching reader.
void read_like_training(const std::string& path) {
  read_shard(path, ShardLimits{64, 32, 5});
  ReaderOptions o;
  o.files = {path};
  o.batch_rows = 8;
  o.seq_len = 32;
  o.max_predictions = 5;
  o.vocab_size = 64;
  PretrainingReader reader(o);
  Batch b;
  for (int i = 0; i < 4; ++i) reader.next(b);
}

// ---- 1. byte flips in the data region of a valid shard ------------------------------------------------------

// Seeds 0 .. seeds-1, then `extra` (seeds that once crashed or hung: 1 crashed in H5HG_read, 545 looped in HDF5's
// heap parser).
void flip_test(bool fixed_layout, int seeds, std::vector<int> extra = {}) {
  TempDir dir;
  const std::string clean = dir / "clean.hdf5", damaged = dir / "damaged.hdf5";
  const SequenceStore s = testing::synthetic_sequences(64, 32, 64, 5, 7);
  if (fixed_layout)
    write_fixed(clean, s, 32, 5);
  else
    write_varlength(clean, s);
  const std::string bytes = read_bytes(clean);
  ASSERT_GT(bytes.size(), 4096u);
  // The clean file reads; so the damaged ones below fail for their damage only.
  const ChildResult ok = run_child([&] { read_like_training(clean); });
  ASSERT_TRUE(ok.exited && ok.code == 0) << ok.err;
  int refused = 0;
  std::vector<int> all(static_cast<size_t>(seeds));
  std::iota(all.begin(), all.end(), 0);
  all.insert(all.end(), extra.begin(), extra.end());
  for (int seed : all) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::string b = bytes;
    // Past the superblock and root group (the first 2 KiB): object headers, heaps, B-trees and raw data.
    const int flips = 1 + int(rng() % 16);
    for (int i = 0; i < flips; ++i) b[2048 + rng() % (b.size() - 2048)] ^= char(1 + rng() % 255);
    write_bytes(damaged, b);
    const ChildResult r = run_child([&] { read_like_training(damaged); });
    expect_clean(r, cat(fixed_layout ? "fixed" : "varlength", " shard, seed ", seed));
    refused += r.code == 2;
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(refused, seeds / 4) << "many damaged shards should be refused";
}

TEST(HostileShard, ByteFlipsInVarlengthShardEndCleanly) { flip_test(false, 200, {545}); }
TEST(HostileShard, ByteFlipsInFixedShardEndCleanly) { flip_test(true, 100); }

// A dataset whose shape claims far more rows than the file holds is refused before anything is allocated.
TEST(HostileShard, ShapeLargerThanTheFileIsRefusedBeforeAllocating) {
  TempDir dir;
  const std::string path = dir / "shard.hdf5";
  write_varlength(path, testing::synthetic_sequences(16, 32, 64, 5, 3));
  std::string bytes = read_bytes(path);
  // The dataspace message of every dataset stores its current and maximum size as 8-byte little-endian
  // integers: turn every "16 rows" into 2^40 rows.
  const std::string sixteen("\x10\0\0\0\0\0\0\0", 8), huge("\0\0\0\0\0\x01\0\0", 8);
  size_t patched = 0;
  for (size_t at = bytes.find(sixteen); at != std::string::npos; at = bytes.find(sixteen, at + 8)) {
    bytes.replace(at, 8, huge);
    ++patched;
  }
  ASSERT_GT(patched, 0u);
  write_bytes(path, bytes);
  const ChildResult r = run_child([&] { read_shard(path, ShardLimits{64, 32, 5}); }, 20, rlim_t{1} << 30);
  expect_clean(r, "shape of 2^40 rows");
  EXPECT_EQ(r.code, 2) << r.err;
}

// ---- 2. a full disk during an HDF5 write -------------------------------------------------------------------

// RLIMIT_FSIZE makes writes past the limit fail with EFBIG (SIGXFSZ ignored): a full disk without privileges.
void small_disk() {
  signal(SIGXFSZ, SIG_IGN);
  const rlimit fsize{64 << 10, 64 << 10};
  setrlimit(RLIMIT_FSIZE, &fsize);
}

TEST(HostileDisk, FullDiskWritingAShardIsOneLine) {
  TempDir dir;
  const std::string path = dir / "big.hdf5";
  const SequenceStore s = testing::synthetic_sequences(4000, 32, 64, 5, 1);
  const ChildResult r = run_child([&] { write_varlength(path, s); }, 30, rlim_t{3} << 30, small_disk);
  expect_clean(r, "shard write on a full disk");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("big.hdf5"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path)) << "a half-written shard was left behind";
  for (const auto& e : std::filesystem::directory_iterator(dir.path)) ADD_FAILURE() << "left behind: " << e.path();
}

TEST(HostileDisk, FullDiskWritingACheckpointIsOneLine) {
  TempDir dir;
  const std::string path = dir / "ckpt.h5";
  const BertConfig c = testing::tiny_bert({.vocab = 512, .hidden = 64, .intermediate = 128});
  const TensorTable table = bert_parameter_table(c);
  FlatTensors params(table);
  const ChildResult r = run_child([&] { save_checkpoint(params, path); }, 30, rlim_t{3} << 30, small_disk);
  expect_clean(r, "checkpoint write on a full disk");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path));
}

// ---- 3. fewer rows than one batch, or none ------------------------------------------------------------------

void short_shard_test(int rows) {
  TempDir dir;
  const std::string path = dir / "short.hdf5";
  write_varlength(path, testing::synthetic_sequences(rows, 32, 64, 5, 1));
  const ChildResult r = run_child(
      [&] {
        ReaderOptions o;
        o.files = {path};
        o.batch_rows = 8;
        o.seq_len = 32;
        o.max_predictions = 5;
        o.vocab_size = 64;
        PretrainingReader reader(o);
        Batch b;
        reader.next(b);
      },
      10);
  EXPECT_TRUE(r.exited) << rows << " rows: killed by signal " << r.signal << " (14: hung until the alarm)";
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("fewer than one batch"), std::string::npos) << r.err;
}

TEST(HostileShard, FewerRowsThanOneBatchIsAnErrorNotAHang) { short_shard_test(5); }
TEST(HostileShard, EmptyShardIsAnErrorNotAHang) { short_shard_test(0); }

// ---- 4. JSON built to break the loader ----------------------------------------------------------------------

// The synthetic config with `from` replaced by `to` (which must occur).
std::string patched_config(const TempDir& dir, const std::string& from, const std::string& to) {
  const auto run = testing::write_synthetic_run(dir.path / "run");
  std::string text = read_bytes(run.config_path);
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  write_bytes(run.config_path, text);
  return run.config_path;
}

std::string load_error(const std::string& path) {
  try {
    load_train_config(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(HostileConfig, DeeplyNestedValueOfTheWrongTypeGivesAShortLine) {
  TempDir dir;
  const std::string nested = std::string(200000, '[') + std::string(200000, ']');
  const std::string path = patched_config(dir, "\"seq_len\": 32", "\"seq_len\": " + nested);
  const ChildResult r = run_child([&] { load_train_config(path); });
  EXPECT_TRUE(r.exited) << "killed by signal " << r.signal;
  EXPECT_EQ(r.code, 2) << r.err.substr(0, 300);
  EXPECT_EQ(lines(r.err), 1);
  EXPECT_LT(r.err.size(), 400u) << r.err.substr(0, 400);
  EXPECT_NE(r.err.find("'seq_len'"), std::string::npos) << r.err.substr(0, 400);
}

TEST(HostileConfig, HugeArrayOfTheWrongTypeIsQuotedShort) {
  TempDir dir;
  std::string array = "[";
  for (int i = 0; i < 200000; ++i) array += (i ? ",1234567" : "1234567");
  array += "]";
  const std::string error = load_error(patched_config(dir, "\"seq_len\": 32", "\"seq_len\": " + array));
  EXPECT_NE(error.find("field 'seq_len' must be an integer, got [1234567,1234567"), std::string::npos) << error.substr(0, 300);
  EXPECT_NE(error.find("..."), std::string::npos);
  EXPECT_LT(error.size(), 300u) << error.substr(0, 300);
}

TEST(HostileConfig, NumberOutOfRangeNamesFileAndField) {
  TempDir dir;
  const std::string path = patched_config(dir, "\"learning_rate\": 0.01", "\"learning_rate\": 1e400");
  const std::string error = load_error(path);
  EXPECT_EQ(error.rfind(path, 0), 0u) << error;
  EXPECT_NE(error.find("field 'lamb.learning_rate'"), std::string::npos) << error;
  EXPECT_NE(error.find("1e400"), std::string::npos) << error;
}

TEST(HostileConfig, HugeLocalBatchIsAConfigErrorNamingTheField) {
  TempDir dir;
  const std::string error = load_error(patched_config(dir, "\"local_batch_size\": 8", "\"local_batch_size\": 2147483647"));
  EXPECT_NE(error.find(": batch: field 'local_batch_size' 2147483647"), std::string::npos) << error;
}

TEST(HostileConfig, HugeTrainStepsNeverGiveANegativeSampleCount) {
  TempDir dir;
  const std::string error =
      load_error(patched_config(dir, "\"train_steps\": 1000", "\"train_steps\": 9223372036854775807"));
  EXPECT_NE(error.find("field 'train_steps' 9223372036854775807 times the global batch 8 overflows"), std::string::npos)
      << error;
  EXPECT_EQ(error.find("max_samples -"), std::string::npos) << error;
}

TEST(HostileConfig, DirectoryAsConfigSaysItIsADirectory) {
  TempDir dir;
  const std::string error = load_error(dir.path.string());
  EXPECT_NE(error.find("is a directory"), std::string::npos) << error;
}

TEST(HostileConfig, JsonExcerptIsShortAndExactWhenItFits) {
  const Json small = Json::parse(R"({"a": [1, 2, {"b": "c"}]})");
  EXPECT_EQ(json_excerpt(small), small.dump());  // the library's own text when it fits
  Json deep = Json::array();
  for (int i = 0; i < 100000; ++i) deep = Json::array({std::move(deep)});
  const std::string e = json_excerpt(deep);
  EXPECT_EQ(e, std::string(60, '[') + "...");
}

// ---- 5. models too large for the machine ------------------------------------------------------------------

TEST(HostileConfig, ParameterEstimateEqualsTheParameterTable) {
  TempDir dir;
  TrainConfig c = load_train_config(testing::write_synthetic_run(dir.path / "run").config_path);
  for (int layers : {1, 2, 5}) {
    c.model.num_hidden_layers = layers;
    c.model.intermediate_size = 96;
    const TensorTable table = bert_parameter_table(c.model);
    double numel = 0;
    for (const TensorInfo& t : table.tensors()) numel += double(t.numel);
    EXPECT_EQ(estimate_memory(c).parameters, numel) << layers << " layers";
  }
}

TEST(HostileConfig, ModelOverTheMachinesMemoryIsRefusedWithTheFigure) {
  TempDir dir;
  TrainConfig c = load_train_config(testing::write_synthetic_run(dir.path / "run").config_path);
  EXPECT_NO_THROW(check_memory(c, physical_memory_bytes()));
  c.model.num_hidden_layers = 1000000;
  c.model.hidden_size = 1024;
  c.model.intermediate_size = 4096;
  // 12.6M parameters a layer: about 1.3e13 parameters, 16 bytes each in master, gradient and moments, plus the host copy.
  const MemoryEstimate e = estimate_memory(c);
  EXPECT_NEAR(e.parameters, 1e6 * (12 * 1024.0 * 1024 + 9 * 1024 + 4096), 1e9);
  EXPECT_GE(e.parameter_bytes, e.parameters * 20);
  try {
    check_memory(c, physical_memory_bytes());
    ADD_FAILURE() << "no error";
  } catch (const InputError& error) {
    const std::string what = error.what();
    EXPECT_TRUE(std::regex_search(what, std::regex("needs at least [0-9.]+ GiB of memory per rank"))) << what;
    EXPECT_NE(what.find("num_hidden_layers"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace bertperf
