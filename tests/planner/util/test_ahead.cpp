// Tests for util/ahead.hpp: the work runs on another thread and its result (or what it threw)
// is taken under its key; work under another key, started over or left at the end is waited
// for and dropped, its exception with it.
#include "../../support.hpp"

#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <thread>

#include "dcpp/planner/util/ahead.hpp"

namespace {
using dcpp::detail::ahead;
using namespace std::chrono_literals;
} // namespace

TEST_CASE("ahead: the result of the work under its key, computed on another thread") {
  ahead<int> a;
  CHECK_FALSE(a.holds(3));
  std::thread::id worker;
  REQUIRE(a.start(3, [&worker] {
    worker = std::this_thread::get_id();
    return 41 + 1;
  }));
  CHECK(a.holds(3));
  CHECK_FALSE(a.holds(4));
  const std::optional<int> r = a.take(3);
  REQUIRE(r.has_value());
  CHECK(*r == 42);
  CHECK(worker != std::this_thread::get_id()); // read after take: the work is done
  CHECK_FALSE(a.holds(3));
  CHECK_FALSE(a.take(3).has_value()); // taken once
}

TEST_CASE("ahead: work under another key is waited for and dropped") {
  ahead<int> a;
  std::atomic<bool> done{false};
  REQUIRE(a.start(1, [&done] {
    std::this_thread::sleep_for(20ms);
    done = true;
    return 1;
  }));
  CHECK_FALSE(a.take(2).has_value());
  CHECK(done); // waited for, not left running
  CHECK_FALSE(a.holds(1));
  CHECK_FALSE(a.take(1).has_value());
}

TEST_CASE("ahead: what the work threw is thrown by take, and dropped with it elsewhere") {
  ahead<int> a;
  REQUIRE(a.start(5, []() -> int { throw std::runtime_error("from the work"); }));
  CHECK_THROWS_WITH_AS(a.take(5), "from the work", std::runtime_error);
  CHECK_FALSE(a.holds(5));
  // under another key, by a new start, by drop and by the destructor: nothing thrown
  REQUIRE(a.start(6, []() -> int { throw std::runtime_error("dropped"); }));
  CHECK_NOTHROW((void)a.take(7));
  REQUIRE(a.start(8, []() -> int { throw std::runtime_error("dropped"); }));
  REQUIRE(a.start(9, [] { return 9; })); // waits for and drops the work under 8
  CHECK(a.take(9) == std::optional<int>(9));
  REQUIRE(a.start(10, []() -> int { throw std::runtime_error("dropped"); }));
  CHECK_NOTHROW(a.drop());
  CHECK_FALSE(a.holds(10));
  CHECK_NOTHROW([] {
    ahead<int> b;
    REQUIRE(b.start(11, []() -> int { throw std::runtime_error("dropped"); }));
  }());
}

TEST_CASE("ahead: the destructor waits for work still running") {
  std::atomic<bool> done{false};
  {
    ahead<int> a;
    REQUIRE(a.start(1, [&done] {
      std::this_thread::sleep_for(20ms);
      done = true;
      return 0;
    }));
  }
  CHECK(done);
}

TEST_CASE("gate: work waiting at it starts once it opens, from any thread, any number of times") {
  using dcpp::detail::gate;
  gate g;
  CHECK_FALSE(g.is_open());
  std::atomic<bool> passed{false};
  ahead<int> a;
  REQUIRE(a.start(1, [&] {
    g.wait();
    passed = true;
    return 1;
  }));
  std::this_thread::sleep_for(20ms);
  CHECK_FALSE(passed); // still waiting
  std::thread opener([&g] { g.open(); });
  opener.join();
  CHECK(g.is_open());
  CHECK(a.take(1) == std::optional<int>(1));
  CHECK(passed);
  g.open(); // again: stays open, and a wait returns at once
  g.wait();
  CHECK(g.is_open());
  gate before; // opened before anyone waits
  before.open();
  REQUIRE(a.start(2, [&before] { return before.wait(), 2; }));
  CHECK(a.take(2) == std::optional<int>(2));
}
