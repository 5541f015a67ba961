// The MLLOG logger's behaviour beyond the byte format (which tests/python/test_mllog_format.py
// compares with Python's json.dumps): rank filtering, the file sink, call-site metadata and the
// metadata merge rule of the official library.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "mllog/mllog.h"

namespace {

namespace fs = std::filesystem;
using bertperf::mllog::Logger;
using bertperf::mllog::Value;

std::vector<std::string> read_lines(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

Value parse_line(const std::string& line) {
  const std::string prefix = ":::MLLOG ";
  EXPECT_EQ(line.rfind(prefix, 0), 0u) << line;
  return Value::parse(line.substr(prefix.size()));
}

fs::path temp_file(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("bertperf_test_mllog_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::remove(dir / name);
  return dir / name;
}

TEST(MllogLogger, WritesMembersInLibraryOrderWithCallSite) {
  const fs::path path = temp_file("order.txt");
  Logger log(Logger::Options{.to_stdout = false, .file = path.string(), .name_space = "", .rank = 0, .file_label = ""});
  const int line = __LINE__ + 1;
  log.event("eval_accuracy", 0.5, {{"epoch_num", 448}});
  log.close_file();
  const auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 1u);
  const Value record = parse_line(lines[0]);
  std::vector<std::string> keys;
  for (const auto& [k, v] : record.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"namespace", "time_ms", "event_type", "key", "value", "metadata"}));
  EXPECT_EQ(record["event_type"], "POINT_IN_TIME");
  EXPECT_TRUE(record["time_ms"].is_number_integer());
  const Value& meta = record["metadata"];
  std::vector<std::string> meta_keys;
  for (const auto& [k, v] : meta.items()) meta_keys.push_back(k);
  EXPECT_EQ(meta_keys, (std::vector<std::string>{"file", "lineno", "epoch_num"}));
  // Repository-relative, so logs carry no build-machine path and stay stable for the seed checker.
  EXPECT_EQ(meta["file"], "tests/cpp/test_mllog.cpp");
  EXPECT_EQ(meta["lineno"], line);
}

TEST(MllogLogger, IntervalEventTypes) {
  const fs::path path = temp_file("types.txt");
  Logger log(Logger::Options{.to_stdout = false, .file = path.string(), .name_space = "ns", .rank = 0, .file_label = ""});
  log.start("run_start");
  log.end("run_stop", nullptr, {{"status", "success"}});
  log.close_file();
  const auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(parse_line(lines[0])["event_type"], "INTERVAL_START");
  EXPECT_EQ(parse_line(lines[0])["namespace"], "ns");
  EXPECT_TRUE(parse_line(lines[0])["value"].is_null());
  EXPECT_EQ(parse_line(lines[1])["event_type"], "INTERVAL_END");
  EXPECT_EQ(parse_line(lines[1])["metadata"]["status"], "success");
}

TEST(MllogLogger, OnlyRankZeroWrites) {
  const fs::path path = temp_file("rank1.txt");
  Logger log(Logger::Options{.to_stdout = false, .file = path.string(), .name_space = "", .rank = 1, .file_label = ""});
  EXPECT_FALSE(log.enabled());
  log.event("seed", 42);
  log.close_file();
  EXPECT_FALSE(fs::exists(path));
}

TEST(MllogLogger, AppendsToFile) {
  const fs::path path = temp_file("append.txt");
  for (int i = 0; i < 2; ++i) {
    Logger log(Logger::Options{.to_stdout = false, .file = path.string(), .name_space = "", .rank = 0, .file_label = ""});
    log.event("seed", i);
  }
  EXPECT_EQ(read_lines(path).size(), 2u);
}

TEST(MllogFormat, UserFileAndLinenoReplaceTheCallSiteInPlace) {
  bertperf::mllog::Event e;
  e.key = "k";
  e.file = "a.cpp";
  e.lineno = 3;
  e.metadata = {{"extra", 1}, {"lineno", 7}};
  const Value meta = parse_line(bertperf::mllog::format_line(e))["metadata"];
  std::vector<std::string> keys;
  for (const auto& [k, v] : meta.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"file", "lineno", "extra"}));
  EXPECT_EQ(meta["lineno"], 7);
}

TEST(MllogFormat, SourcePathsAreRepositoryRelative) {
  using bertperf::mllog::source_file_for_log;
  EXPECT_EQ(source_file_for_log("/home/u/src/bertperf/implementations/harness/timed_run.cpp"),
            "implementations/harness/timed_run.cpp");
  EXPECT_EQ(source_file_for_log("/x/implementations/../tests/cpp/a.cpp"), "tests/cpp/a.cpp");
  EXPECT_EQ(source_file_for_log("/elsewhere/file.cpp"), "file.cpp");
  EXPECT_EQ(source_file_for_log("file.cpp"), "file.cpp");
}

TEST(MllogFormat, InvalidUtf8BecomesReplacementCharacter) {
  EXPECT_EQ(bertperf::mllog::python_json_dumps(Value(std::string("a\xff" "b\xe2\x82"))), "\"a\\ufffdb\\ufffd\\ufffd\"");
}

}  // namespace
