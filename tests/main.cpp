// doctest's main for the host suites.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "support.hpp"
