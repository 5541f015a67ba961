// Reading whole input files with one-line errors: a missing path, a directory or a read failure is an
// InputError naming the path and what was expected there ("a vocabulary file", "a JSON file", ...).
#pragma once

#include <string>

namespace bertperf {

std::string read_file(const std::string& path, const std::string& what);

}  // namespace bertperf
