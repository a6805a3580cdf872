// Tests for dcpp::plan_builder (dcpp/planner/packing.hpp): a custom policy's plans are built
// step by step, and every step that would make the plan invalid is refused with its place named.
#include "../support.hpp"

#include <cstdint>
#include <random>
#include <vector>

#include "dcpp/dcpp.hpp"

namespace {
dcpp::problem make(std::vector<std::int64_t> lengths, dcpp::topology t = dcpp::topology::aligned,
                   std::int32_t world = 8) {
  dcpp::plan_options o;
  o.world_size = world;
  o.max_tokens_per_rank = 1000;
  o.group_topology = t;
  return dcpp::make_problem(o, lengths);
}
std::vector<std::int32_t> ids(std::initializer_list<std::int32_t> v) {
  return v;
}
} // namespace

TEST_CASE("plan_builder: a valid plan, built step by step, validates") {
  const auto pr = make({1500, 300, 300, 3900, 100});
  dcpp::plan_builder b(pr, "mine");
  const auto m0 = b.add_microbatch();
  CHECK(b.free_block(m0, 4) == 0);
  b.add_group(m0, 0, 4, ids({3}));
  CHECK(b.free_block(m0, 4) == 4);
  CHECK(b.free_block(m0, 2) == 4);
  CHECK(b.free_block(m0, 3) == std::nullopt); // not a power of two
  b.add_group(m0, 4, 2, ids({0}));
  b.add_group(m0, 6, 1, ids({1, 2}));
  CHECK(b.rank_tokens(ids({1, 2}), 1) == 600);
  CHECK_FALSE(b.placed(4));
  const auto m1 = b.add_microbatch();
  b.add_group(m1, 0, 1, ids({4}));
  const dcpp::plan p = std::move(b).finish();
  CHECK(p.policy == "mine");
  CHECK(p.microbatches.size() == 2);
  CHECK(dcpp::validate(p, pr.options));
}

TEST_CASE("plan_builder: each invalid step names its place and limit") {
  const auto pr = make({1500, 300, 300, 3900, 100});
  dcpp::plan_builder b(pr, "mine");
  CHECK_THROWS_WITH_AS(b.add_group(0, 0, 1, ids({1})),
                       doctest::Contains("micro-batch 0 does not exist"), dcpp::error);
  const auto m = b.add_microbatch();
  CHECK_THROWS_WITH_AS(b.add_group(m, 2, 4, ids({1})), doctest::Contains("not a legal group"),
                       dcpp::error); // misaligned
  CHECK_THROWS_WITH_AS(b.add_group(m, 6, 4, ids({1})), doctest::Contains("not a legal group"),
                       dcpp::error); // past the world
  CHECK_THROWS_WITH_AS(b.add_group(m, 0, 3, ids({1})), doctest::Contains("not a legal group"),
                       dcpp::error);
  CHECK_THROWS_WITH_AS(b.add_group(m, 0, 1, ids({9})),
                       doctest::Contains("sample 9 is not in the batch of 5"), dcpp::error);
  CHECK_THROWS_WITH_AS(b.add_group(m, 0, 1, ids({3})),
                       doctest::Contains("sample 3 (length 3900) needs at least 4 ranks"),
                       dcpp::error);
  CHECK_THROWS_WITH_AS(b.add_group(m, 0, 1, ids({})), doctest::Contains("no samples"), dcpp::error);
  CHECK_THROWS_WITH_AS(b.add_group(m, 0, 2, ids({0, 1, 2})),
                       doctest::Contains("1050 tokens per rank, over max_tokens_per_rank = 1000"),
                       dcpp::error);
  b.add_group(m, 0, 2, ids({0}));
  CHECK_THROWS_WITH_AS(b.add_group(m, 1, 1, ids({1})),
                       doctest::Contains("rank 1 is already in group 0"), dcpp::error);
  CHECK_THROWS_WITH_AS(b.add_group(m, 2, 2, ids({0})),
                       doctest::Contains("sample 0 is already in micro-batch 0"), dcpp::error);
  b.add_group(m, 4, 4, ids({3}));
  CHECK_THROWS_WITH_AS(std::move(b).finish(),
                       doctest::Contains("sample 1 (length 300) is in no group"), dcpp::error);
}

TEST_CASE("plan_builder: contiguous blocks, seeded random first-fit plans always validate") {
  std::mt19937_64 rng(77);
  for (int round = 0; round < 40; ++round) {
    std::vector<std::int64_t> lengths(1 + rng() % 60);
    const auto world = static_cast<std::int32_t>(3 + rng() % 11);
    const std::uint64_t longest = round % 2 == 0 ? 900 : static_cast<std::uint64_t>(world) * 900;
    for (auto& l : lengths)
      l = 1 + static_cast<std::int64_t>(rng() % longest);
    const auto pr = make(lengths, dcpp::topology::contiguous, world);
    dcpp::plan_builder b(pr, "first_fit");
    for (std::size_t s = 0; s < pr.size(); ++s) {
      const std::int32_t cp = pr.min_cp_of[s];
      std::optional<std::int32_t> first;
      std::size_t mb = 0;
      for (; mb < b.microbatches() && !(first = b.free_block(mb, cp)); ++mb) {
      }
      if (!first)
        first = b.free_block(mb = b.add_microbatch(), cp);
      REQUIRE(first.has_value());
      b.add_group(mb, *first, cp, std::vector<std::int32_t>{static_cast<std::int32_t>(s)});
    }
    const auto p = std::move(b).finish();
    CHECK(dcpp::validate(p, pr.options));
  }
}
