// Tests for include/dcpp/planner/options.hpp.
#include "../support.hpp"

#include "../helpers.hpp"

#include <string>
#include <vector>

#include "dcpp/planner/options.hpp"
#include "dcpp/workload/generators.hpp"

namespace {
dcpp::plan_options opts(std::int32_t n, std::int64_t m) {
  return dcpp_test::options(n, m);
}
bool mentions(const dcpp::status& s, std::initializer_list<const char*> words) {
  for (const char* w : words)
    if (s.message.find(w) == std::string::npos)
      return false;
  return true;
}
} // namespace

TEST_CASE("options: aligned groups are powers of two on aligned offsets inside the world") {
  const auto o = opts(24, 4096);
  CHECK(dcpp::is_legal_group(o, 0, 16));
  CHECK_FALSE(dcpp::is_legal_group(o, 16, 16)); // would reach rank 31
  CHECK(dcpp::is_legal_group(o, 16, 8));
  CHECK_FALSE(dcpp::is_legal_group(o, 4, 8));  // misaligned
  CHECK_FALSE(dcpp::is_legal_group(o, 0, 12)); // not a power of two
  CHECK(dcpp::legal_cp_sizes(o) == std::vector<std::int32_t>{1, 2, 4, 8, 16});
}

TEST_CASE("options: contiguous groups take any size within the limits") {
  auto o = opts(6, 4096);
  o.group_topology = dcpp::topology::contiguous;
  o.min_cp = 1;
  o.max_cp = 4;
  CHECK(dcpp::is_legal_group(o, 1, 3));
  CHECK_FALSE(dcpp::is_legal_group(o, 3, 4));
  CHECK_FALSE(dcpp::is_legal_group(o, 0, 5)); // over max_cp
  CHECK(dcpp::legal_cp_sizes(o) == std::vector<std::int32_t>{1, 2, 3, 4});
}

TEST_CASE("options: each bad option is named with its value and limit") {
  using enum dcpp::status_code;
  auto o = opts(0, 4096);
  auto s = dcpp::check_options(o);
  CHECK(s.code == invalid_option);
  CHECK(mentions(s, {"world_size", "0"}));

  o = opts(8, 1);
  s = dcpp::check_options(o);
  CHECK(s.code == budget_below_padding);
  CHECK(mentions(s, {"max_tokens_per_rank", "1", "padding"}));

  o = opts(8, 4096);
  o.padding_unit = 4096;
  s = dcpp::check_options(o);
  CHECK(s.code == budget_below_padding);
  CHECK(mentions(s, {"8192"}));

  o = opts(24, 4096);
  o.min_cp = 16;
  s = dcpp::check_options(o);
  CHECK(s.code == world_not_divisible);
  CHECK(mentions(s, {"world_size = 24", "min_cp = 16"}));

  o = opts(8, 4096);
  o.min_cp = 3;
  s = dcpp::check_options(o);
  CHECK(s.code == invalid_option);
  CHECK(mentions(s, {"min_cp = 3", "power of two"}));

  o = opts(8, 4096);
  o.min_cp = 4;
  o.max_cp = 2;
  CHECK(dcpp::check_options(o).code == invalid_option);

  // max_cp 3 meant 2 without a word (issue 22); refused in the aligned topology, taken as is
  // in the contiguous one
  o = opts(8, 4096);
  o.max_cp = 3;
  s = dcpp::check_options(o);
  CHECK(s.code == invalid_option);
  CHECK(mentions(s, {"max_cp = 3", "power of two"}));
  o.group_topology = dcpp::topology::contiguous;
  CHECK(dcpp::check_options(o).ok());
  // a world that is not a power of two: the largest group is named, not the world
  o = opts(6, 1000);
  const std::vector<std::int64_t> too_long{4001};
  CHECK(mentions(dcpp::check_problem(o, too_long),
                 {"largest plannable length 4000", "largest group 4 x max_tokens_per_rank"}));

  o = opts(8, 4096);
  o.microbatch_multiple = 0;
  CHECK(mentions(dcpp::check_options(o), {"microbatch_multiple = 0"}));
  CHECK(dcpp::check_options(opts(24, 4096)).ok());
}

TEST_CASE("options: check_problem names the sample, its length and the limit") {
  using enum dcpp::status_code;
  const auto o = opts(8, 1000);
  CHECK(dcpp::check_problem(o, {}).code == empty_batch);
  const std::vector<std::int64_t> bad{10, 20, 0, 5};
  auto s = dcpp::check_problem(o, bad);
  CHECK(s.code == invalid_length);
  CHECK(s.sample == 2);
  CHECK(mentions(s, {"sample 2", "length = 0"}));
  const std::vector<std::int64_t> neg{-3};
  CHECK(dcpp::check_problem(o, neg).code == invalid_length);
  // the largest plannable length: 8 ranks x 1000 tokens, padded to a multiple of 16
  CHECK(dcpp::max_plannable_length(o) == 8000);
  const std::vector<std::int64_t> fits{8000};
  CHECK(dcpp::check_problem(o, fits).ok());
  const std::vector<std::int64_t> too_long{1, 8001};
  s = dcpp::check_problem(o, too_long);
  CHECK(s.code == sample_too_long);
  CHECK(s.sample == 1);
  CHECK(mentions(s, {"sample 1", "8001", "8000", "largest group 8", "max_tokens_per_rank = 1000"}));
}

TEST_CASE("options: check_problem bounds the batch's tokens and its samples") {
  using enum dcpp::status_code;
  // the largest world and budget: a sample may hold 2^60 tokens, four of them 2^62
  auto o = opts(dcpp::max_world_size, dcpp::max_tokens_per_rank_limit);
  const std::int64_t biggest = dcpp::max_plannable_length(o);
  REQUIRE(biggest == std::int64_t{1} << 60);
  std::vector<std::int64_t> lengths(4, biggest);
  CHECK(dcpp::check_problem(o, lengths).ok());
  lengths.push_back(1);
  auto s = dcpp::check_problem(o, lengths);
  CHECK(s.code == invalid_length);
  CHECK(s.sample == 4);
  CHECK(mentions(s, {"sample 4", "(4611686018427387905)", "limit 4611686018427387904"}));
  // the sample count: 2^24 plan (checked here; planned by dcpp-plan in 15 s), one more does not
  o = opts(8, 4096);
  lengths.assign(static_cast<std::size_t>(dcpp::max_batch_samples), 1);
  CHECK(dcpp::check_problem(o, lengths).ok());
  lengths.push_back(1);
  s = dcpp::check_problem(o, lengths);
  CHECK(s.code == invalid_length);
  CHECK(s.message == "the batch holds 16777217 samples; the limit is 16777216");
}

TEST_CASE("options: min_cp_of is the smallest legal size that fits, against brute force") {
  for (const auto topo : {dcpp::topology::aligned, dcpp::topology::contiguous}) {
    auto o = opts(24, 1000);
    o.group_topology = topo;
    o.padding_unit = 3;
    std::vector<std::int64_t> lengths;
    for (std::int64_t l = 1; l <= dcpp::max_plannable_length(o); l += 37)
      lengths.push_back(l);
    const auto pr = dcpp::make_problem(o, lengths);
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      std::int32_t expect = 0;
      for (std::int32_t cp = 1; cp <= 24 && expect == 0; ++cp) {
        if (topo == dcpp::topology::aligned && !dcpp::is_power_of_two(cp))
          continue;
        const std::int64_t padded = (lengths[i] + 6 * cp - 1) / (6 * cp) * (6 * cp);
        if (padded / cp <= 1000)
          expect = cp;
      }
      CHECK(pr.min_cp_of[i] == expect);
    }
  }
}

TEST_CASE("options: least_rank_tokens sums each sample's least padded rank-tokens over its legal "
          "sizes, against brute force on 300 seeded batches") {
  // contiguous and aligned worlds of 2-40 ranks, padding units 1-5: every legal size from the
  // sample's smallest tried, no cut-offs; aligned sizes always pad least at the smallest, and a
  // larger contiguous size pads less somewhere in most contiguous batches
  dcpp::workload::rng r(20261133);
  int padded_less = 0;
  for (int trial = 0; trial < 300; ++trial) {
    auto o = opts(static_cast<std::int32_t>(r.uniform_int(2, 40)), r.uniform_int(20, 700));
    o.padding_unit = r.uniform_int(1, 5);
    o.group_topology =
        r.uniform_int(0, 2) == 0 ? dcpp::topology::aligned : dcpp::topology::contiguous;
    if (o.group_topology == dcpp::topology::aligned)
      o.world_size = std::int32_t{1} << r.uniform_int(1, 5);
    const std::int64_t cap = dcpp::max_plannable_length(o);
    std::vector<std::int64_t> lengths(static_cast<std::size_t>(r.uniform_int(1, 60)));
    for (auto& l : lengths)
      l = r.uniform_int(1, cap);
    CAPTURE(trial);
    CAPTURE(o.world_size);
    CAPTURE(o.max_tokens_per_rank);
    CAPTURE(o.padding_unit);
    CAPTURE(lengths);
    const auto pr = dcpp::make_problem(o, lengths);
    std::int64_t least = 0;
    std::int64_t at_smallest = 0;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      std::int64_t best = -1;
      for (const std::int32_t cp : pr.cp_sizes)
        if (cp >= pr.min_cp_of[i]) {
          const std::int64_t t = dcpp::tokens_per_rank(o, lengths[i], cp) * cp;
          best = best < 0 ? t : std::min(best, t);
        }
      least += best;
      at_smallest += dcpp::tokens_per_rank(o, lengths[i], pr.min_cp_of[i]) * pr.min_cp_of[i];
    }
    CHECK(pr.least_rank_tokens == least);
    if (o.group_topology == dcpp::topology::aligned)
      CHECK(least == at_smallest);
    padded_less += least < at_smallest ? 1 : 0;
  }
  CHECK(padded_less >= 150); // 191 of the 300
}

TEST_CASE("options: least_padded_tokens tries larger contiguous sizes, and past its work gives "
          "the least multiple, a lower value") {
  auto o = opts(6, 64);
  o.group_topology = dcpp::topology::contiguous;
  const std::vector<std::int32_t> sizes = {1, 2, 3, 4, 5, 6};
  std::int64_t work = 100;
  // 273 tokens need 5 ranks (56 per rank: 280), and 6 ranks pad them to 276 (46 per rank)
  CHECK(dcpp::least_padded_tokens(o, sizes, 273, 5, work) == 276);
  CHECK(work == 99);
  std::int64_t none = 0;
  CHECK(dcpp::least_padded_tokens(o, sizes, 273, 5, none) == 274); // 2 x padding_unit
  o.group_topology = dcpp::topology::aligned;
  const std::vector<std::int32_t> doubling = {1, 2, 4};
  CHECK(dcpp::least_padded_tokens(o, doubling, 131, 4, none) == 136); // never past the smallest
}

TEST_CASE("options: tokens_per_rank checks its contract") {
  const auto o = opts(8, 4096);
  CHECK(dcpp::tokens_per_rank(o, 100, 2) == 50);
  CHECK(dcpp::tokens_per_rank(o, 101, 2) == 52);
  CHECK_THROWS_AS((void)dcpp::tokens_per_rank(o, 100, 0), dcpp_test::contract_violation);
}

TEST_CASE("options: hostile sizes are refused with the limit, never wrap or loop") {
  auto o = opts(2147483647, 4096); // a signed 32-bit counter once looped forever here
  auto s = dcpp::check_options(o);
  CHECK_FALSE(s);
  CHECK(mentions(s, {"world_size = 2147483647", "exceeds the limit 16777216"}));
  o = opts(8, std::int64_t{1} << 62); // products of it wrapped to 0 and divided: SIGFPE
  s = dcpp::check_options(o);
  CHECK(mentions(s, {"max_tokens_per_rank = 4611686018427387904", "limit 68719476736"}));
  o = opts(8, 4096);
  o.padding_unit = std::int64_t{1} << 61;
  CHECK(mentions(dcpp::check_options(o), {"padding_unit = 2305843009213693952", "limit 1048576"}));
  // at the limits every option is accepted, and the largest samples plan without overflow
  o = opts(dcpp::max_world_size, dcpp::max_tokens_per_rank_limit);
  o.group_topology = dcpp::topology::aligned;
  CHECK(dcpp::check_options(o));
  CHECK(dcpp::max_plannable_length(o) == dcpp::max_tokens_per_rank_limit * dcpp::max_world_size);
  CHECK(dcpp::legal_cp_sizes(o).size() == 25); // 1, 2, ..., 2^24
  // a batch whose tokens add up past 2^62 is refused at the sample where they do
  const std::int64_t longest = dcpp::max_plannable_length(o); // 2^60
  const std::vector<std::int64_t> lengths(6, longest);
  s = dcpp::check_problem(o, lengths);
  CHECK_FALSE(s);
  CHECK(s.sample == 4);
  CHECK(mentions(s, {"sample 4", "exceed the limit 4611686018427387904"}));
}
