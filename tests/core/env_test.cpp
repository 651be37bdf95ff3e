// env_flag: the one parser of megaops' 0|1 switches from the environment.
#include "core/env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace megaops {
namespace {

constexpr const char* VAR = "MEGAOPS_ENV_FLAG_TEST";

TEST(EnvFlag, FallbackWhenUnsetOrEmptyElseTheValue) {
  unsetenv(VAR);
  EXPECT_TRUE(env_flag(VAR, true));
  EXPECT_FALSE(env_flag(VAR, false));
  setenv(VAR, "", 1);
  EXPECT_TRUE(env_flag(VAR, true));
  setenv(VAR, "0", 1);
  EXPECT_FALSE(env_flag(VAR, true));
  setenv(VAR, "1", 1);
  EXPECT_TRUE(env_flag(VAR, false));
  unsetenv(VAR);
}

TEST(EnvFlag, AnythingElseIsAnInputErrorNamingTheVariableAndValue) {
  for (const char* bad : {"yes", "true", "01", " 1", "2"}) {
    setenv(VAR, bad, 1);
    try {
      env_flag(VAR, false);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg, std::string(VAR) + ": expected 0 or 1, found '" + bad + "'");
    }
  }
  unsetenv(VAR);
}

}  // namespace
}  // namespace megaops
