// dcpp's version (semantic versioning; docs/install.md says what is stable). The project's
// meson.build states the same number, and a unit test holds them together.
#pragma once

#define DCPP_VERSION_MAJOR 0
#define DCPP_VERSION_MINOR 1
#define DCPP_VERSION_PATCH 0
//! MAJOR * 10000 + MINOR * 100 + PATCH, for `#if DCPP_VERSION >= 100` (0.1.0).
#define DCPP_VERSION (DCPP_VERSION_MAJOR * 10000 + DCPP_VERSION_MINOR * 100 + DCPP_VERSION_PATCH)
#define DCPP_VERSION_STRING "0.1.0"
