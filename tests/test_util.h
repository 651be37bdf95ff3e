// Helpers shared by CPU tests.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/error.h"

namespace megaops::testing {

// Expects `fn` to throw InputError whose message is one line containing every fragment; `what`
// names the input in the failure message.
inline void expect_input_error(const std::function<void()>& fn,
                               const std::vector<std::string>& parts,
                               const std::string& what = "") {
  try {
    fn();
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const std::string& p : parts) {
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    }
    return;
  }
  ADD_FAILURE() << "expected InputError" << (what.empty() ? "" : " for " + what);
}

}  // namespace megaops::testing
