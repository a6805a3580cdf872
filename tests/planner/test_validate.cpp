// Tests for include/dcpp/planner/validate.hpp: each violation is found and named.
#include "../support.hpp"

#include <string>

#include "dcpp/planner/validate.hpp"

namespace {
dcpp::plan_options opts() {
  dcpp::plan_options o;
  o.world_size = 4;
  o.max_tokens_per_rank = 1000;
  return o;
}
dcpp::plan good() {
  dcpp::plan p;
  p.world_size = 4;
  p.max_tokens_per_rank = 1000;
  p.lengths = {100, 900, 3000, 50};
  p.microbatches.push_back({{{0, 4, {2}}}, 0, 0});
  p.microbatches.push_back({{{0, 2, {0, 3}}, {2, 1, {1}}}, 0, 0});
  return p;
}
std::string why(const dcpp::plan& p, const dcpp::plan_options& o = opts()) {
  const auto s = dcpp::validate(p, o);
  CHECK_FALSE(s.ok());
  CHECK(s.code == dcpp::status_code::invalid_plan);
  return s.message;
}
} // namespace

TEST_CASE("validate: a correct plan passes") {
  CHECK(dcpp::validate(good(), opts()).ok());
}

TEST_CASE("validate: every violation is named") {
  auto p = good();
  p.microbatches[1].groups[1].samples.push_back(2);
  CHECK(why(p).find("sample 2 appears twice") != std::string::npos);

  p = good();
  p.microbatches[1].groups[1].samples = {};
  CHECK(why(p).find("no samples") != std::string::npos);

  p = good();
  p.microbatches[1].groups.pop_back();
  CHECK(why(p).find("sample 1 (length 900) is in no micro-batch") != std::string::npos);

  p = good();
  p.microbatches[1].groups[1].first_rank = 1; // overlaps [0, 2)
  CHECK(why(p).find("rank 1 is in group 0 and group 1") != std::string::npos);

  p = good();
  p.microbatches[1].groups[0].first_rank = 1; // cp 2 at an odd offset
  CHECK(why(p).find("not a legal aligned group") != std::string::npos);

  p = good();
  p.microbatches[0].groups[0].cp = 2; // 3000 tokens on 2 ranks: 1500 > 1000
  CHECK(why(p).find("exceed max_tokens_per_rank = 1000") != std::string::npos);

  p = good();
  p.microbatches[1].groups[1].samples = {7};
  CHECK(why(p).find("outside") != std::string::npos);

  auto o = opts();
  o.microbatch_multiple = 4;
  CHECK(why(good(), o).find("multiple of microbatch_multiple = 4") != std::string::npos);

  o = opts();
  o.world_size = 8;
  CHECK(why(good(), o).find("world_size") != std::string::npos);

  o = opts();
  o.min_cp = 2;
  CHECK(why(good(), o).find("cp = 1") != std::string::npos);
}

TEST_CASE("validate: a hostile plan file's options and lengths are errors, not UB (fuzzer)") {
  // microbatch_multiple 0 divided by zero (tests/fuzz/regressions/plan_json)
  auto o = opts();
  o.microbatch_multiple = 0;
  CHECK(why(good(), o) == "options: microbatch_multiple = 0 must be >= 1");
  // a multiple of 10^8 planned until killed (every plan has at least that many micro-batches)
  o.microbatch_multiple = 100000000;
  CHECK(why(good(), o) == "options: microbatch_multiple = 100000000 exceeds the limit 1024");
  o.microbatch_multiple = dcpp::max_microbatch_multiple;
  CHECK(dcpp::check_options(o).ok());
  auto p = good();
  p.lengths[1] = -5;
  CHECK(why(p) == "sample 1: length = -5 must be positive, and the batch's tokens at most "
                  "4611686018427387904");
  p = good();
  p.lengths[3] = std::int64_t{1} << 62; // the sum would pass 2^62
  CHECK(why(p).find("sample 3: length = 4611686018427387904") == 0);
  // a first rank near 2^31: first_rank + cp overflowed int32 in is_legal_group
  p = good();
  p.microbatches[0].groups[0].first_rank = 2147483647;
  CHECK(why(p).find("ranks [2147483647, 2147483651) with cp = 4 is not a legal") !=
        std::string::npos);
}
