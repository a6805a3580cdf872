// Tests for include/dcpp/route/head_parallel.hpp on the local backend: seeded worlds of 1-8 ranks
// cut into CP groups of every size, the exchange checked bit for bit against the whole tensor,
// the split rule, and bad arguments failing every rank of the group with one message.
#include "../support.hpp"

#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "dcpp/comm/local.hpp"
#include "every_rank.hpp"
#include "head_parallel_check.hpp"

namespace hp = dcpp_test::head_parallel;

TEST_CASE("head_split: heads dealt over the group, or each head over several ranks") {
  const dcpp::head_split eight_on_four{8, 4};
  CHECK(eight_on_four.count() == 2);
  CHECK(eight_on_four.replicas() == 1);
  CHECK(eight_on_four.first(3) == 6);
  // grouped-query attention: 32 query heads and 4 key/value heads on cp 8: rank r's query heads
  // [4r, 4r+4) use key/value head r / 2, which the split gives it
  const dcpp::head_split queries{32, 8};
  const dcpp::head_split kv{4, 8};
  CHECK(kv.replicas() == 2);
  CHECK(kv.count() == 1);
  for (std::int32_t r = 0; r < 8; ++r) {
    CHECK(kv.first(r) == queries.first(r) / (32 / 4));
    CHECK(kv.first_holder(r) == (r % 2 == 0));
  }
  CHECK(dcpp::head_split::check(12, 4).ok());
  CHECK(dcpp::head_split::check(2, 8).ok());
  const dcpp::status bad = dcpp::head_split::check(6, 4);
  CHECK_FALSE(bad.ok());
  CHECK(bad.message.find("6 heads cannot be dealt over a CP group of 4") != std::string::npos);
  CHECK_FALSE(dcpp::head_split::check(0, 4).ok());
}

TEST_CASE("cp2hp / hp2cp: bit for bit against the whole tensor, 600 seeded worlds of 1-8 ranks") {
  std::int32_t replicated = 0;
  for (std::uint64_t seed = 0; seed < 600; ++seed) {
    const int world = 1 + static_cast<int>(seed % 8);
    CAPTURE(seed);
    REQUIRE_NOTHROW(dcpp::run_local(world, [&](dcpp::local_communicator& c) { hp::run(c, seed); }));
    for (std::int32_t first = 0; const std::int32_t cp : hp::group_sizes(seed, world)) {
      const auto g = hp::make_group(seed, first, cp, 0);
      replicated += g.shape.heads < cp ? 1 : 0;
      first += cp;
    }
  }
  CHECK(replicated > 50); // groups whose heads are shared by several ranks were among them
}

namespace {
using dcpp_test::route::messages_on_every_rank;

dcpp::thd_layout layout_of(std::int32_t cp, std::int32_t rank, std::vector<std::int32_t> padded) {
  dcpp::thd_layout l;
  l.first_rank = 0;
  l.cp = cp;
  l.rank_in_group = rank;
  for (std::size_t i = 0; i < padded.size(); ++i) {
    l.samples.push_back(static_cast<std::int32_t>(i));
    l.cu_seqlens.push_back(l.cu_seqlens.back() + padded[i]);
    l.cu_seqlens_padded.push_back(l.cu_seqlens_padded.back() + padded[i]);
  }
  return l;
}
} // namespace

TEST_CASE("cp2hp: heads that do not deal over the group are refused on every rank") {
  const auto messages = messages_on_every_rank(4, [](dcpp::local_communicator& c) {
    const dcpp::thd_layout l = layout_of(4, c.rank(), {8, 16});
    const dcpp::head_shape shape{6, 2};
    std::vector<float> in(static_cast<std::size_t>(dcpp::cp_elements(l, shape)));
    std::vector<float> out(static_cast<std::size_t>(l.cu_seqlens_padded.back() * 2 * 2));
    dcpp::cp2hp(c, l, shape, std::span<const float>(in), std::span<float>(out));
  });
  for (const auto& m : messages)
    CHECK(m == "rank 0: head-parallel exchange: 6 heads cannot be dealt over a CP group of 4: "
               "the heads must be a multiple of cp (each rank holds heads / cp) or cp a multiple "
               "of the heads (each head held by cp / heads ranks)");
}

TEST_CASE("cp2hp / hp2cp: one rank's wrong buffer or layout fails the whole group, naming it") {
  const auto size = messages_on_every_rank(3, [](dcpp::local_communicator& c) {
    const dcpp::thd_layout l = layout_of(3, c.rank(), {6, 12});
    const dcpp::head_shape shape{3, 4};
    std::vector<double> in(static_cast<std::size_t>(dcpp::cp_elements(l, shape)));
    std::vector<double> out(static_cast<std::size_t>(dcpp::hp_elements(l, shape)));
    if (c.rank() == 2)
      out.pop_back();
    dcpp::cp2hp(c, l, shape, std::span<const double>(in), std::span<double>(out));
  });
  for (const auto& m : size)
    CHECK(m == "rank 2: cp2hp: the head-parallel buffer holds 71 elements, expected 72 (18 "
               "padded tokens x 1 heads x 4)");
  const auto padding = messages_on_every_rank(2, [](dcpp::local_communicator& c) {
    const dcpp::thd_layout l = layout_of(2, c.rank(), {4, 6});
    const dcpp::head_shape shape{2, 1};
    std::vector<double> in(5 * 2), out(10);
    dcpp::hp2cp(c, l, shape, std::span<const double>(in), std::span<double>(out));
  });
  for (const auto& m : padding)
    CHECK(m == "rank 0: hp2cp: sample 1 (position 1) is padded to 6 tokens, not a non-negative "
               "multiple of 2 x cp = 4");
  const auto disagree = messages_on_every_rank(2, [](dcpp::local_communicator& c) {
    const dcpp::thd_layout l =
        layout_of(2, c.rank(), c.rank() == 0 ? std::vector{4, 8} : std::vector{8, 4});
    const dcpp::head_shape shape{2, 1};
    std::vector<double> in(6 * 2), out(12);
    dcpp::cp2hp(c, l, shape, std::span<const double>(in), std::span<double>(out));
  });
  for (const auto& m : disagree)
    CHECK(m.starts_with("ranks disagree on the head-parallel exchange's sequences and head shape"));
}

TEST_CASE(
    "cp2hp / hp2cp: a head shape past max_exchange_elements is an error, not a wrapped size") {
  // 2^62 / 2^8 heads: every padded token of the group's 16 times that overflows 2^62
  const auto huge = messages_on_every_rank(2, [](dcpp::local_communicator& c) {
    const dcpp::thd_layout l = layout_of(2, c.rank(), {4, 12});
    const dcpp::head_shape shape{256, std::int64_t{1} << 54};
    std::vector<double> in(4), out(4); // never read: the shape is refused first
    dcpp::cp2hp(c, l, shape, std::span<const double>(in), std::span<double>(out));
  });
  for (const auto& m : huge)
    CHECK(m == "rank 0: cp2hp: 16 padded tokens x 256 heads x head_dim 18014398509481984 is more "
               "than max_exchange_elements = 4611686018427387904");
  dcpp::thd_layout l;
  l.first_rank = 0, l.cp = 2, l.rank_in_group = 0, l.samples = {0};
  l.cu_seqlens = {0, 8}, l.cu_seqlens_padded = {0, 8};
  for (const std::int64_t head_dim :
       {std::int64_t{1} << 62, std::numeric_limits<std::int64_t>::max(), std::int64_t{-1}}) {
    CAPTURE(head_dim);
    CHECK_THROWS_WITH_AS((void)dcpp::cp_elements(l, {2, head_dim}),
                         doctest::Contains("is not a buffer size from 0 to max_exchange_elements"),
                         dcpp::error);
    CHECK_THROWS_AS((void)dcpp::hp_elements(l, {2, head_dim}), dcpp::error);
  }
  CHECK(dcpp::cp_elements(l, {2, std::int64_t{1} << 59}) == std::int64_t{1} << 62);
}

TEST_CASE("hp2cp: summing replicas needs an arithmetic element type") {
  struct pair {
    float a, b;
  };
  const auto messages = messages_on_every_rank(2, [](dcpp::local_communicator& c) {
    const dcpp::thd_layout l = layout_of(2, c.rank(), {4});
    const dcpp::head_shape shape{1, 1};
    std::vector<pair> in(4), out(2);
    dcpp::hp2cp(c, l, shape, std::span<const pair>(in), std::span<pair>(out),
                dcpp::replica_merge::sum);
  });
  for (const auto& m : messages)
    CHECK(m == "rank 0: hp2cp: replica_merge::sum needs an arithmetic element type");
}
