// The one-line InputError a test expects of bad input: `f` throws one, and its message holds every one of `parts` on
// one line.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "core/errors.h"

namespace bertperf::testing {

template <typename F>
void expect_input_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
  }
}

}  // namespace bertperf::testing
