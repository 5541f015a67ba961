// Whole-file reads with one-line errors (files.h).
#include "core/files.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/errors.h"

namespace bertperf {

std::string read_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found) throw_input(path, "no such file");
  if (status.type() == std::filesystem::file_type::directory) throw_input(path, "is a directory, not " + what);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_input(path, "cannot open " + what);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw_input(path, "cannot read " + what);
  return text.str();
}

}  // namespace bertperf
