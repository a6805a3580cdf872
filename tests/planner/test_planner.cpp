// Tests for include/dcpp/planner/planner.hpp: check-then-act, user policies, distributed agreement.
#include "../support.hpp"

#include "../helpers.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dcpp/comm/local.hpp"
#include "dcpp/planner/packing/uniform_cp.hpp"
#include "dcpp/planner/planner.hpp"
#include "dcpp/workload/generators.hpp"

namespace {
dcpp::plan_options opts(std::int32_t n, std::int64_t m) {
  return dcpp_test::options(n, m);
}

// A user's cost policy (linear attention: no quadratic term).
struct linear_attention_cost {
  double per_token = 1e-5;
  double cost(std::int64_t length, std::int32_t cp) const {
    return per_token * static_cast<double>(length) / cp + (cp > 1 ? 1e-3 * (cp - 1) : 0.0);
  }
};

// A bucketing policy with a bug: it forgets the last sample.
struct lossy_bucketing {
  dcpp::bucket_list buckets(const dcpp::problem& p, std::span<const double>) const {
    dcpp::bucket_list out(1);
    for (std::int32_t s = 0; s + 1 < static_cast<std::int32_t>(p.size()); ++s)
      out[0].push_back(s);
    return out;
  }
};

// by_cp_size, counting its calls.
struct counting_bucketing {
  int* calls = nullptr;
  dcpp::bucket_list buckets(const dcpp::problem& p, std::span<const double> work) const {
    ++*calls;
    return dcpp::by_cp_size{}.buckets(p, work);
  }
};

// A packing policy with a bug: everything in one cp-1 group.
struct overfull_packing {
  static constexpr std::string_view name = "overfull";
  template <class E>
  dcpp::plan pack(const dcpp::problem& pr, const E&) const {
    dcpp::plan p;
    p.world_size = pr.options.world_size;
    p.max_tokens_per_rank = pr.options.max_tokens_per_rank;
    p.lengths = pr.lengths;
    dcpp::plan_group g{0, 1, {}, 0, 0.0};
    for (std::int32_t s = 0; s < static_cast<std::int32_t>(pr.size()); ++s)
      g.samples.push_back(s);
    p.microbatches.push_back({{g}, 0, 0});
    return p;
  }
};

// A user's estimator that breaks its contract at one length: a NaN, an infinity or a negative
// cost there (`bad_length`), or costs each finite whose sum over the batch overflows.
struct broken_cost {
  enum class fault { nan, infinite, negative, overflowing } how = fault::nan;
  std::int64_t bad_length = 0;
  double cost(std::int64_t length, std::int32_t cp) const {
    const double fine = static_cast<double>(length) * static_cast<double>(length) / cp;
    switch (how) {
    case fault::nan: return length == bad_length ? std::nan("") : fine;
    case fault::infinite:
      return length == bad_length ? std::numeric_limits<double>::infinity() : fine;
    case fault::negative: return length == bad_length ? -fine : fine;
    case fault::overflowing: return 1e306;
    }
    return fine;
  }
};

// A communicator whose ranks disagree: min and max of any value differ.
struct split_brain_communicator {
  int rank() const { return 1; }
  int size() const { return 2; }
  std::vector<std::int64_t> all_gather_v(std::span<const std::int64_t> local) {
    std::vector<std::int64_t> out(local.begin(), local.end());
    out.insert(out.end(), local.begin(), local.end());
    return out;
  }
  std::uint64_t all_reduce_min(std::uint64_t v) {
    return v - (fail_options ? 1 : calls++ < 1 ? 0 : 1);
  }
  std::uint64_t all_reduce_max(std::uint64_t v) { return v; }
  bool fail_options = false;
  int calls = 0;
};
} // namespace

TEST_CASE("planner: can_plan is the same check that make_plan throws") {
  const dcpp::planner<> p(opts(8, 1000));
  const std::vector<std::int64_t> bad{100, 9000, 5};
  const auto s = p.can_plan(bad);
  CHECK(s.code == dcpp::status_code::sample_too_long);
  CHECK(s.sample == 1);
  try {
    (void)p.make_plan(bad);
    FAIL("make_plan accepted a sample longer than the world");
  } catch (const dcpp::error& e) {
    CHECK(e.code() == s.code);
    CHECK(e.sample() == 1);
    CHECK(std::string(e.what()) == s.message);
  }
  CHECK(p.can_plan(std::vector<std::int64_t>{100, 8000, 5}).ok());
}

TEST_CASE("planner: a user's estimator plugs in and changes the plan's numbers") {
  const auto lengths = dcpp::workload::long_tail(300, 2, 0.05, 65536);
  const dcpp::planner<linear_attention_cost> user(opts(16, 4096));
  const dcpp::planner<> standard(opts(16, 4096));
  const auto a = user.make_plan(lengths);
  const auto b = standard.make_plan(lengths);
  CHECK(dcpp::validate(a, user.options()).ok());
  CHECK(a.metrics.estimated_step_time != doctest::Approx(b.metrics.estimated_step_time));
  CHECK(a.metrics.efficiency > 0.5);
}

TEST_CASE("planner: a bucketing policy that loses a sample is an error naming it") {
  const dcpp::planner<dcpp::length_squared_cost, dcpp::balanced_with<lossy_bucketing>> p(
      opts(4, 1000));
  const std::vector<std::int64_t> lengths{10, 20, 30};
  CHECK_THROWS_WITH_AS((void)p.make_plan(lengths), "bucketing policy lost sample 2", dcpp::error);
}

TEST_CASE("balanced: the bucketing runs only where a construction reads the buckets") {
  const auto small = dcpp::workload::sft_lognormal(200, 3);
  const auto large = dcpp::workload::sft_lognormal(4096, 3);
  int calls = 0;
  const dcpp::balanced_with<counting_bucketing> counted{.bucketing = counting_bucketing{&calls}};
  const dcpp::planner<dcpp::transformer_cost, dcpp::balanced_with<counting_bucketing>>
      balanced_planner(opts(64, 8192), {}, counted);
  // a small batch runs the megatron construction, which reads them
  (void)balanced_planner.make_plan(small);
  CHECK(calls == 1);
  // 4,096 x 64 is past the megatron limit: balanced does not read them, and plans as always
  const auto p = balanced_planner.make_plan(large);
  CHECK(calls == 1);
  CHECK(dcpp::plan_hash(p) == dcpp::plan_hash(dcpp::planner<>(opts(64, 8192)).make_plan(large)));
  // megatron_greedy always reads them
  const dcpp::planner<dcpp::transformer_cost, dcpp::megatron_greedy_with<counting_bucketing>>
      greedy(opts(64, 8192), {}, {.bucketing = counting_bucketing{&calls}});
  (void)greedy.make_plan(large);
  CHECK(calls == 2);
  // and a lossy bucketing policy fails wherever its buckets are read, never silently
  const dcpp::planner<dcpp::transformer_cost, dcpp::megatron_greedy_with<lossy_bucketing>> lossy(
      opts(64, 8192));
  CHECK_THROWS_WITH_AS((void)lossy.make_plan(large),
                       doctest::Contains("bucketing policy lost sample 4095"), dcpp::error);
}

TEST_CASE("planner: an invalid plan from a packing policy is caught by validate") {
  const dcpp::planner<dcpp::length_squared_cost, overfull_packing> p(opts(4, 100));
  const std::vector<std::int64_t> lengths{60, 60};
  CHECK_THROWS_WITH_AS((void)p.make_plan(lengths),
                       doctest::Contains("packing policy overfull produced an invalid plan"),
                       dcpp::error);
}

TEST_CASE("planner: plan_distributed gathers, plans and proves agreement") {
  dcpp::planner<> serial(opts(8, 2048));
  const std::vector<std::int64_t> local{100, 5000, 300};
  const auto p = serial.plan_distributed(local);
  CHECK(p.lengths == local);
  CHECK(dcpp::plan_hash(p) == dcpp::plan_hash(serial.make_plan(local)));

  dcpp::planner<dcpp::transformer_cost, dcpp::balanced, split_brain_communicator> bad(
      opts(8, 2048));
  CHECK_THROWS_WITH_AS((void)bad.plan_distributed(local),
                       doctest::Contains("differs from another rank"), dcpp::error);
  bad.communicator().fail_options = true;
  CHECK_THROWS_WITH_AS((void)bad.plan_distributed(local),
                       doctest::Contains("different plan options"), dcpp::error);
}

TEST_CASE("planner: plan_distributed names the option the ranks disagree on, on every rank") {
  for (const int differing : {0, 1, 2}) {
    std::vector<std::string> errors(3);
    dcpp::run_local(3, [&](dcpp::local_communicator& comm) {
      auto o = opts(8, 2048);
      if (comm.rank() == 1 && differing == 0)
        o.max_tokens_per_rank = 4096;
      if (comm.rank() == 2 && differing == 1)
        o.group_topology = dcpp::topology::contiguous;
      if (comm.rank() == 0 && differing == 2)
        o.microbatch_overhead = 0.25;
      dcpp::planner<dcpp::transformer_cost, dcpp::balanced, dcpp::local_communicator> p(o, {}, {},
                                                                                        comm);
      try {
        (void)p.plan_distributed(std::vector<std::int64_t>{100, 200});
      } catch (const dcpp::error& e) {
        errors[static_cast<std::size_t>(comm.rank())] = e.what();
      }
    });
    const std::string want = std::vector<std::string>{
        "max_tokens_per_rank ranges from 2048 to 4096",
        "group_topology ranges from aligned to contiguous",
        "microbatch_overhead given ranges from 0 to 1"}[static_cast<std::size_t>(differing)];
    for (const auto& e : errors) {
      CAPTURE(e);
      CHECK(e.find("plan_distributed: ranks were given different plan options: " + want +
                   " over the ranks") != std::string::npos);
    }
  }
}

TEST_CASE("planner: the options hash sees the micro-batch overhead") {
  auto o = opts(8, 2048);
  const std::uint64_t none = dcpp::options_hash(o);
  o.microbatch_overhead = 0.0;
  const std::uint64_t zero = dcpp::options_hash(o);
  o.microbatch_overhead = 0.005;
  const std::uint64_t five = dcpp::options_hash(o);
  CHECK(none != zero); // "the estimator's" and "free" are different plans
  CHECK(zero != five);
  CHECK(none != five);
  o.microbatch_overhead = 0.005;
  CHECK(dcpp::options_hash(o) == five);
}

TEST_CASE("planner: plan_seconds times the call, and is the only field that varies") {
  const dcpp::planner<> p(opts(32, 4096));
  const auto lengths = dcpp::workload::bimodal(512, 77);
  auto a = p.make_plan(lengths);
  auto b = p.make_plan(lengths);
  CHECK(a.metrics.plan_seconds > 0);
  a.metrics.plan_seconds = b.metrics.plan_seconds = 0;
  CHECK(a == b);
}

namespace {
// what `make_plan` throws under packing policy P for `estimator`: its code, sample and message
struct thrown {
  dcpp::status_code code = dcpp::status_code::ok;
  std::int64_t sample = -1;
  std::string message = "no error";
};
template <class Planner>
thrown error_of_plan(const Planner& p, const std::vector<std::int64_t>& lengths) {
  try {
    const dcpp::plan plan = p.make_plan(lengths);
    // a plan made is one a step time can describe
    CHECK(std::isfinite(plan.metrics.estimated_step_time));
    CHECK(std::isfinite(plan.metrics.efficiency));
  } catch (const dcpp::error& e) {
    return {e.code(), e.sample(), e.what()};
  }
  return {};
}
template <class P>
thrown plan_error(const broken_cost& estimator, const std::vector<std::int64_t>& lengths) {
  return error_of_plan(dcpp::planner<broken_cost, P>(opts(8, 4096), estimator), lengths);
}
} // namespace

TEST_CASE("planner: an estimator's NaN, infinite, negative or overflowing costs are refused by "
          "name, under every packing policy") {
  // a cost outside the contract reached balanced as a plan "of world_size 0" and static_cp as a
  // step time of inf; the cost table's first pass now names the length, size, value and sample
  using fault = broken_cost::fault;
  dcpp::workload::rng r(0xc057);
  std::vector<std::int64_t> lengths(301);
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const std::int64_t l = r.uniform_int(1, 3000);
    lengths[i] = i == 217 || i == 250 ? 1777 : l == 1777 ? 1778 : l; // 217: the first of 1777
  }
  for (const fault how : {fault::nan, fault::infinite, fault::negative}) {
    CAPTURE(static_cast<int>(how));
    const broken_cost e{how, 1777};
    const std::string value = how == fault::nan ? "nan" : how == fault::infinite ? "inf" : "-";
    for (const thrown& t :
         {plan_error<dcpp::balanced>(e, lengths), plan_error<dcpp::static_cp>(e, lengths),
          plan_error<dcpp::megatron_greedy>(e, lengths)}) {
      CAPTURE(t.message);
      CHECK(t.code == dcpp::status_code::invalid_cost);
      CHECK(t.sample == 217);
      CHECK(t.message.starts_with("estimator: cost(1777, 1) = " + value));
      CHECK(t.message.ends_with(" for sample 217; a cost must be finite and >= 0"));
    }
    // the same costs at a length the batch does not hold plan as before
    const broken_cost elsewhere{how, 4001};
    CHECK(plan_error<dcpp::balanced>(elsewhere, lengths).message == "no error");
  }
  // every cost finite: 1e306 at every size. Each sample's areas over sizes 1 to 8 sum to
  // 1.5e307, finite; over 301 samples they pass a double
  const broken_cost huge{fault::overflowing, 0};
  const thrown t = plan_error<dcpp::balanced>(huge, lengths);
  CHECK(t.code == dcpp::status_code::invalid_cost);
  CHECK(t.sample == -1);
  CHECK(t.message == "estimator: the costs overflow: the 301 samples' areas (cost x size) over "
                     "their legal sizes sum to inf; loads and step times must stay finite");
  CHECK(plan_error<dcpp::static_cp>(huge, lengths).message == t.message);
  // a batch short enough for the sum to stay finite plans
  CHECK(plan_error<dcpp::balanced>(huge, std::vector<std::int64_t>{100, 200, 300}).message ==
        "no error");
  // one sample's areas pass a double on their own, each cost finite: 1e308 at size 1,
  // 1.6e308 at 2 (its area 3.2e308)
  struct steep {
    double cost(std::int64_t length, std::int32_t cp) const {
      return length == 1777 ? (cp == 1 ? 1e308 : 1.6e308) : 1.0;
    }
  };
  const dcpp::planner<steep, dcpp::balanced> p(opts(8, 4096));
  CHECK_THROWS_WITH_AS((void)p.make_plan(lengths),
                       "estimator: the costs overflow: the areas (cost x size) of sample 217 "
                       "(length 1777) over its legal sizes sum to inf; loads and step times must "
                       "stay finite",
                       dcpp::error);
}

namespace {
// length / cp with a micro-batch overhead of its own
struct priced_overhead {
  double overhead = 0;
  double cost(std::int64_t length, std::int32_t cp) const {
    return static_cast<double>(length) / cp;
  }
  double microbatch_overhead() const { return overhead; }
};
template <class P>
thrown overhead_error(double own, std::optional<double> option,
                      const std::vector<std::int64_t>& lengths, std::int32_t multiple) {
  dcpp::plan_options o = opts(8, 4096);
  o.microbatch_overhead = option;
  o.microbatch_multiple = multiple;
  return error_of_plan(dcpp::planner<priced_overhead, P>(o, priced_overhead{own}), lengths);
}
} // namespace

TEST_CASE("planner: a micro-batch overhead no step time can carry is refused by name, under "
          "every packing policy") {
  // an overhead of 1e308 (the option or the estimator's) planned 60 samples in 30 micro-batches
  // to a step time of inf and an efficiency of NaN (null in the plan JSON); the estimator's
  // negative or NaN overhead planned, or failed later as the option's
  dcpp::workload::rng r(0x0be4);
  std::vector<std::int64_t> lengths(61);
  for (auto& l : lengths)
    l = r.uniform_int(100, 20000);
  // no plan has more micro-batches than samples (61, to the multiple): the limit leaves room
  // for them and the samples' areas over their legal sizes
  double areas = 0;
  for (const std::int64_t l : lengths)
    for (std::int32_t cp = 1; cp <= 8; cp *= 2)
      if (l <= std::int64_t{cp} * 4096)
        areas += static_cast<double>(l);
  const double limit = (std::numeric_limits<double>::max() - areas) / 61 * (1 - 1e-9);
  const auto limit_text = fmt::format("{}", limit);
  for (const auto& [policy, error_of] :
       {std::pair{"balanced", &overhead_error<dcpp::balanced>},
        std::pair{"megatron_greedy", &overhead_error<dcpp::megatron_greedy>},
        std::pair{"static_cp", &overhead_error<dcpp::static_cp>}}) {
    const std::string name = policy;
    CAPTURE(name);
    // the option
    thrown t = error_of(0, 1e308, lengths, 1);
    CHECK(t.code == dcpp::status_code::invalid_option);
    CHECK(t.message == "microbatch_overhead = 1e+308 exceeds the limit " + limit_text +
                           ": 61 micro-batches (a sample each) and the work must cost below the "
                           "largest double");
    // to the multiple: 64 micro-batches, a limit 61/64 of the one above
    t = error_of(0, limit * 0.97, lengths, 16);
    CHECK(t.message.starts_with(
        fmt::format("microbatch_overhead = {} exceeds the limit ", limit * 0.97)));
    CHECK(error_of(0, limit * 0.95, lengths, 16).message == "no error");
    CHECK(t.message.find(": 64 micro-batches (a sample each, to a multiple of 16) and the work") !=
          std::string::npos);
    // the estimator's own
    t = error_of(1e308, std::nullopt, lengths, 1);
    CHECK(t.code == dcpp::status_code::invalid_cost);
    CHECK(t.message.starts_with("estimator: microbatch_overhead() = 1e+308 exceeds the limit " +
                                limit_text));
    for (const double bad : {-1.0, std::numeric_limits<double>::quiet_NaN(),
                             std::numeric_limits<double>::infinity()}) {
      t = error_of(bad, std::nullopt, lengths, 1);
      CHECK(t.code == dcpp::status_code::invalid_cost);
      CHECK(t.message == fmt::format("estimator: microbatch_overhead() = {} must be finite and "
                                     ">= 0",
                                     bad));
      // the option set, the estimator's own is not used
      CHECK(error_of(bad, 0.5, lengths, 1).message == "no error");
    }
    // at the limit (and a little below, within the rounding of the sum) the plans are finite
    CHECK(error_of(0, limit, lengths, 1).message == "no error");
    CHECK(error_of(limit * 0.999, std::nullopt, lengths, 1).message == "no error");
  }
}

namespace {
// A cost table, as the Python module builds one for a user's callable: it holds each length of
// the batch at its legal sizes from the smallest that fits it, and records any other query
// (where the table would have nothing to answer).
struct table_like_cost {
  std::shared_ptr<const std::set<std::pair<std::int64_t, std::int32_t>>> held;
  std::shared_ptr<std::vector<std::pair<std::int64_t, std::int32_t>>> outside =
      std::make_shared<std::vector<std::pair<std::int64_t, std::int32_t>>>();
  double cost(std::int64_t length, std::int32_t cp) const {
    if (held->count({length, cp}) == 0)
      outside->emplace_back(length, cp);
    // rises with the size past a few ranks: wide groups cost more than they save
    const auto l = static_cast<double>(length);
    return 1e-6 * l * (1 + 0.3 * cp) + 1e-12 * l * l / cp;
  }
};

template <class Packing>
std::vector<std::pair<std::int64_t, std::int32_t>>
asked_outside(const dcpp::plan_options& o, const std::vector<std::int64_t>& lengths) {
  const dcpp::problem pr = dcpp::make_problem(o, lengths);
  auto held = std::make_shared<std::set<std::pair<std::int64_t, std::int32_t>>>();
  for (std::size_t s = 0; s < pr.size(); ++s)
    for (const std::int32_t cp : pr.cp_sizes)
      if (cp >= pr.min_cp_of[s])
        held->emplace(pr.lengths[s], cp);
  const table_like_cost e{held};
  const dcpp::planner<table_like_cost, Packing> p(o, e);
  if (p.can_plan(lengths).ok()) // static_cp's one size may not divide a contiguous world
    (void)p.make_plan(lengths);
  return *e.outside;
}
} // namespace

TEST_CASE("planner: every packing policy asks the estimator for legal sizes alone") {
  // balanced's bisected construction weighed blocks of 14 ranks of 16 (8 + 6) at 6 ranks, whole
  // blocks of 10 as one group, and halves above max_cp: a Python cost's table has no such entry,
  // so dcpp.plan raised "the planner asked for cost(17893, 6), which the cost table does not
  // hold" on a batch it should plan
  dcpp::workload::rng r(0x1e9a1);
  int planned = 0;
  for (int trial = 0; trial < 48; ++trial) {
    dcpp::plan_options o;
    const bool aligned = trial % 3 != 2;
    o.group_topology = aligned ? dcpp::topology::aligned : dcpp::topology::contiguous;
    const std::int32_t worlds[] = {8, 16, 32, 12, 24, 6};
    o.world_size = worlds[r.uniform_int(0, aligned ? 2 : 5)];
    o.max_tokens_per_rank = std::int64_t{1024} << r.uniform_int(0, 4);
    o.padding_unit = std::int64_t{1} << r.uniform_int(0, 2);
    if (trial % 4 == 1)
      o.max_cp = std::int32_t{1} << r.uniform_int(1, 3);
    if (trial % 5 == 3 && o.world_size % 2 == 0)
      o.min_cp = 2;
    std::vector<std::int64_t> lengths(static_cast<std::size_t>(r.uniform_int(1, 160)));
    const std::int64_t longest = dcpp::max_plannable_length(o);
    for (std::int64_t& l : lengths)
      l = dcpp::workload::clamp_length(std::exp(7.5 + 1.3 * r.normal()), 1, longest);
    CAPTURE(trial);
    CAPTURE(o.world_size);
    CAPTURE(o.max_tokens_per_rank);
    CAPTURE(o.max_cp);
    CAPTURE(o.min_cp);
    CAPTURE(aligned);
    if (!dcpp::check_problem(o, lengths).ok())
      continue;
    ++planned;
    const auto first = [](const auto& v) {
      return v.empty()
                 ? std::string("none")
                 : "cost(" + std::to_string(v[0].first) + ", " + std::to_string(v[0].second) + ")";
    };
    CHECK(first(asked_outside<dcpp::balanced>(o, lengths)) == "none");
    CHECK(first(asked_outside<dcpp::megatron_greedy>(o, lengths)) == "none");
    CHECK(first(asked_outside<dcpp::static_cp>(o, lengths)) == "none");
    CHECK(first(asked_outside<dcpp::uniform_cp>(o, lengths)) == "none");
  }
  CHECK(planned >= 40);
}
