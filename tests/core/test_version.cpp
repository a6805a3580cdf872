// The version macros state the project's version (meson.build passes it as DCPP_MESON_VERSION).
#include "../support.hpp"

#include <string>

#include "dcpp/version.hpp"

TEST_CASE("DCPP_VERSION_* state meson.build's version") {
  CHECK(std::string(DCPP_VERSION_STRING) == DCPP_MESON_VERSION);
  const std::string parts = std::to_string(DCPP_VERSION_MAJOR) + "." +
                            std::to_string(DCPP_VERSION_MINOR) + "." +
                            std::to_string(DCPP_VERSION_PATCH);
  CHECK(parts == DCPP_MESON_VERSION);
  CHECK(DCPP_VERSION == DCPP_VERSION_MAJOR * 10000 + DCPP_VERSION_MINOR * 100 + DCPP_VERSION_PATCH);
}
