// Tests for include/dcpp/planner/{estimator,transformer_cost,calibrated_cost}.hpp.
#include "../support.hpp"

#include <array>
#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "dcpp/planner/calibrated_cost.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/transformer_cost.hpp"
#include "dcpp/workload/generators.hpp"

namespace {
struct user_moe_cost { // a user's policy: models the concept without touching dcpp
  double experts = 8;
  double cost(std::int64_t length, std::int32_t cp) const {
    return static_cast<double>(length) / cp * (1.0 + 1.0 / experts);
  }
};
struct no_cost_member {};
struct wrong_signature {
  double cost(const char*) const { return 0; }
};
struct returns_string {
  const char* cost(std::int64_t, std::int32_t) const { return "x"; }
};
} // namespace

TEST_CASE("estimator: the concept accepts models and rejects the rest") {
  static_assert(dcpp::workload_estimator<dcpp::megatron_cost>);
  static_assert(dcpp::workload_estimator<dcpp::transformer_cost>);
  static_assert(dcpp::workload_estimator<dcpp::calibrated_cost>);
  static_assert(dcpp::workload_estimator<user_moe_cost>);
  static_assert(!dcpp::workload_estimator<no_cost_member>);
  static_assert(!dcpp::workload_estimator<wrong_signature>);
  static_assert(!dcpp::workload_estimator<returns_string>);
  static_assert(!dcpp::workload_estimator<int>);
}

TEST_CASE("estimator: megatron_cost is length^2 / cp") {
  const dcpp::megatron_cost e;
  CHECK(e.cost(4096, 1) == 4096.0 * 4096.0);
  CHECK(e.cost(65536, 16) == 65536.0 * 65536.0 / 16);
}

TEST_CASE("transformer_cost: terms against a hand computation for llama3-8b on h100") {
  const dcpp::transformer_cost e;
  // parameters per token of llama3-8b: 32 layers of (4096*(4096+2*1024) + 4096^2 + 3*4096*14336)
  // plus the 4096 x 128256 head
  const double per_layer = 4096.0 * (4096 + 2 * 1024) + 4096.0 * 4096 + 3.0 * 4096 * 14336;
  const double params = per_layer * 32 + 4096.0 * 128256;
  const double linear = 3 * 2 * params;           // FLOP per token, forward+backward
  const double attention = 3.5 * 2.0 * 4096 * 32; // FLOP per L^2
  const double l = 10000;
  const double expect = linear * l / (0.6 * 989e12) + attention * l * l / (0.45 * 989e12);
  CHECK(e.cost(10000, 1) == doctest::Approx(expect).epsilon(1e-12));
  // the two forward FLOP terms are equal near 60K tokens for an 8B model (DESIGN.md section 1)
  const double crossover = (linear / 3.0) / (attention / 3.5);
  CHECK(crossover > 50000);
  CHECK(crossover < 70000);
}

TEST_CASE("transformer_cost: spreading costs area only through exposed communication") {
  const dcpp::transformer_cost e;
  for (const std::int64_t l : {256, 1000, 4096, 32768, 131072}) {
    double previous = e.cost(l, 1);
    for (std::int32_t cp = 2; cp <= 64; cp *= 2) {
      // area (cp x time) never drops below the cp=1 area
      CHECK(e.cost(l, cp) * cp >= e.cost(l, 1) * (1 - 1e-12));
      previous = e.cost(l, cp);
    }
    (void)previous;
  }
  // tiny chunks on a big group: latency-bound, much more area; long samples spread for free
  CHECK(e.cost(512, 64) * 64 > 10 * e.cost(512, 1));
  CHECK(e.cost(131072, 16) * 16 == doctest::Approx(e.cost(131072, 1)).epsilon(1e-9));
  // monotone in length
  for (std::int32_t cp : {1, 4, 32})
    for (std::int64_t l = 64; l < 200000; l = l * 3 / 2)
      CHECK(e.cost(l, cp) <= e.cost(l + 1, cp));
}

TEST_CASE("transformer_cost: a row of costs has the bits of cost(), every preset and size") {
  std::vector<std::int32_t> sizes(1024);
  for (std::size_t i = 0; i < sizes.size(); ++i)
    sizes[i] = static_cast<std::int32_t>(i + 1); // powers of two (scaled) and the rest (cost)
  std::mt19937_64 rng(29);
  std::vector<std::int64_t> lengths{1, 2, 3, 127, 128, 4095, 4096, 131072, 1 << 22, 9999999};
  for (int i = 0; i < 40; ++i)
    lengths.push_back(static_cast<std::int64_t>(
        1 + rng() % (std::uint64_t{1} << (1 + rng() % 23)))); // log-spread over 1..2^23
  std::vector<double> row(sizes.size());
  for (const auto& model : dcpp::model_presets)
    for (const auto& device : dcpp::device_presets) {
      const dcpp::transformer_cost e(model, device);
      for (const std::int64_t length : lengths) {
        e.costs(length, sizes, row);
        for (std::size_t i = 0; i < sizes.size(); ++i) {
          INFO(model.name << "@" << device.name << " length " << length << " cp " << sizes[i]);
          REQUIRE(std::bit_cast<std::uint64_t>(row[i]) ==
                  std::bit_cast<std::uint64_t>(e.cost(length, sizes[i])));
        }
      }
    }
  // a shorter output span is filled as far as it goes
  const dcpp::transformer_cost e;
  std::vector<double> two(2, -1.0);
  e.costs(4096, sizes, two);
  CHECK(two[0] == e.cost(4096, 1));
  CHECK(two[1] == e.cost(4096, 2));
}

TEST_CASE("transformer_cost: presets by name") {
  CHECK(dcpp::transformer_cost::from_preset("llama3-70b@a100").has_value());
  CHECK(dcpp::transformer_cost::from_preset("qwen2.5-7b")->device().name == "h100");
  CHECK_FALSE(dcpp::transformer_cost::from_preset("gpt5@h100").has_value());
  CHECK_FALSE(dcpp::transformer_cost::from_preset("llama3-8b@tpu").has_value());
  CHECK(dcpp::transformer_cost::preset_names().find("llama3-8b@h100") != std::string::npos);
  const auto big = *dcpp::transformer_cost::from_preset("llama3-70b@h100");
  CHECK(big.cost(8192, 1) > dcpp::transformer_cost{}.cost(8192, 1));
}

TEST_CASE("calibrated_cost: recovers the coefficients of exact data") {
  const std::array<double, 4> truth{2.0e-6, 3.0e-11, 1.5e-3, 4.0e-8};
  const dcpp::calibrated_cost reference(truth);
  std::vector<dcpp::calibration_row> rows;
  dcpp::workload::rng r(5);
  for (int i = 0; i < 40; ++i) {
    const std::int64_t l = r.uniform_int(512, 131072);
    const std::int32_t cp = 1 << r.uniform_int(0, 5);
    rows.push_back({l, cp, reference.cost(l, cp)});
  }
  const auto fitted = dcpp::calibrated_cost::fit(rows);
  for (std::size_t k = 0; k < 4; ++k)
    CHECK(fitted.coefficients()[k] == doctest::Approx(truth[k]).epsilon(1e-6));
}

TEST_CASE("calibrated_cost: rows that only use cp = 1 fit the compute terms, ring terms zero") {
  std::vector<dcpp::calibration_row> rows;
  for (std::int64_t l : {1000, 2000, 5000, 9000, 17000})
    rows.push_back({l, 1, 1e-6 * l + 1e-11 * l * l});
  const auto fitted = dcpp::calibrated_cost::fit(rows);
  CHECK(fitted.coefficients()[0] == doctest::Approx(1e-6).epsilon(1e-6));
  CHECK(fitted.coefficients()[1] == doctest::Approx(1e-11).epsilon(1e-6));
  CHECK(fitted.coefficients()[2] == 0.0);
  CHECK(fitted.coefficients()[3] == 0.0);
}

TEST_CASE("calibrated_cost: errors name the row or the coefficient") {
  const std::vector<dcpp::calibration_row> few{{1000, 1, 0.1}};
  CHECK_THROWS_WITH_AS(dcpp::calibrated_cost::fit(few), doctest::Contains("cannot determine"),
                       dcpp::error);
  const std::vector<dcpp::calibration_row> bad{{1000, 1, 0.1}, {0, 1, 0.2}, {3000, 1, 0.3}};
  CHECK_THROWS_WITH_AS(dcpp::calibrated_cost::fit(bad), doctest::Contains("calibration row 2"),
                       dcpp::error);
  // one length only: tokens and length^2 columns are proportional
  const std::vector<dcpp::calibration_row> same{{1000, 1, 0.1}, {1000, 1, 0.11}, {1000, 1, 0.09}};
  CHECK_THROWS_WITH_AS(dcpp::calibrated_cost::fit(same), doctest::Contains("do not determine"),
                       dcpp::error);
}

TEST_CASE("estimator: the micro-batch overhead is the estimator's, or zero") {
  CHECK(dcpp::microbatch_overhead(dcpp::megatron_cost{}) == 0.0);
  CHECK(dcpp::microbatch_overhead(user_moe_cost{}) == 0.0);
  CHECK(dcpp::microbatch_overhead(dcpp::transformer_cost{}) == 5e-3);
  dcpp::device_spec slow = dcpp::device_presets[0];
  slow.microbatch_overhead = 0.25;
  CHECK(dcpp::microbatch_overhead(dcpp::transformer_cost(dcpp::model_presets[0], slow)) == 0.25);
}
