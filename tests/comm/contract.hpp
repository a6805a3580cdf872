// The communicator contract suite: one set of checks instantiated for every backend (local
// threads, MPI processes). Each check runs on every rank of `comm` and throws on violation.
#pragma once

#include <cstdint>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dcpp/comm/communicator.hpp"
#include "dcpp/error.hpp"

namespace dcpp_test::contract {

inline void expect(bool condition, const std::string& what) {
  if (!condition)
    throw std::runtime_error("contract: " + what);
}

//! Runs `call`, which must throw dcpp::error with a communication_error; returns its message.
template <class F>
std::string expect_comm_error(F&& call, const std::string& what) {
  try {
    call();
  } catch (const dcpp::error& e) {
    expect(e.code() == dcpp::status_code::communication_error,
           what + ": wrong status code, message: " + e.what());
    return e.what();
  }
  throw std::runtime_error("contract: " + what + ": no error raised");
}

//! A data buffer in the memory a communicator moves (`C::buffer_memory`): host vectors here; a
//! device backend's test specialises this (see tests/gpu/test_nccl_communicator.cpp).
template <class C, class T, class = void>
struct buffer {
  explicit buffer(std::vector<T> init) : values(std::move(init)) {}
  std::span<T> span() { return values; }
  std::span<const T> cspan() const { return values; }
  std::vector<T> host() const { return values; }
  std::vector<T> values;
};

template <class C, class T>
buffer<C, T> make(C&, std::vector<T> init) {
  return buffer<C, T>(std::move(init));
}

template <dcpp::communicator C>
void rank_and_size(C& c) {
  expect(c.size() >= 1 && c.rank() >= 0 && c.rank() < c.size(), "rank within [0, size)");
  auto one = make(c, std::vector<std::int64_t>{1});
  c.all_reduce(one.span(), dcpp::reduce_op::sum);
  expect(one.host()[0] == c.size(), "sum of ones is the size");
  auto r = make(c, std::vector<std::int64_t>{c.rank()});
  c.all_reduce(r.span(), dcpp::reduce_op::max);
  expect(r.host()[0] == c.size() - 1, "ranks are 0..size-1");
}

template <dcpp::communicator C>
void all_gather_fixed(C& c) {
  const int n = c.size();
  for (std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{3}}) {
    std::vector<double> values(k);
    for (std::size_t i = 0; i < k; ++i)
      values[i] = c.rank() * 10.0 + static_cast<double>(i) + 0.25;
    auto in = make(c, values);
    auto gathered = make(c, std::vector<double>(k * static_cast<std::size_t>(n), -1.0));
    c.all_gather(in.cspan(), gathered.span());
    const std::vector<double> out = gathered.host();
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < k; ++i)
        expect(out[static_cast<std::size_t>(r) * k + i] == r * 10.0 + static_cast<double>(i) + 0.25,
               fmt::format("all_gather element {} of rank {}", i, r));
  }
}

template <dcpp::communicator C>
void all_gather_variable(C& c) {
  // Rank r contributes (r * 7) % 5 values, zero for some ranks.
  auto count = [](int r) { return static_cast<std::size_t>((r * 7) % 5); };
  std::vector<std::int64_t> in(count(c.rank()));
  for (std::size_t i = 0; i < in.size(); ++i)
    in[i] = c.rank() * 100 + static_cast<std::int64_t>(i);
  const auto out = c.all_gather_v(std::span<const std::int64_t>(in));
  std::vector<std::int64_t> expected;
  for (int r = 0; r < c.size(); ++r)
    for (std::size_t i = 0; i < count(r); ++i)
      expected.push_back(r * 100 + static_cast<std::int64_t>(i));
  expect(out == expected, "all_gather_v concatenates in rank order");
  const std::vector<double> empty;
  expect(c.all_gather_v(std::span<const double>(empty)).empty(), "all_gather_v of nothing");
}

template <dcpp::communicator C>
void all_to_all_variable(C& c) {
  const int n = c.size();
  auto count = [](int s, int d) { return static_cast<std::int64_t>((s + 2 * d + 1) % 4); };
  std::vector<std::int64_t> send_counts(static_cast<std::size_t>(n)),
      recv_counts(static_cast<std::size_t>(n));
  std::vector<double> in;
  for (int d = 0; d < n; ++d) {
    send_counts[static_cast<std::size_t>(d)] = count(c.rank(), d);
    recv_counts[static_cast<std::size_t>(d)] = count(d, c.rank());
    for (std::int64_t i = 0; i < count(c.rank(), d); ++i)
      in.push_back(c.rank() * 1000.0 + d * 10.0 + static_cast<double>(i));
  }
  auto sent = make(c, in);
  auto received = make(c, std::vector<double>(static_cast<std::size_t>(std::accumulate(
                              recv_counts.begin(), recv_counts.end(), std::int64_t{0}))));
  c.all_to_all_v(sent.cspan(), std::span<const std::int64_t>(send_counts), received.span(),
                 std::span<const std::int64_t>(recv_counts));
  const std::vector<double> out = received.host();
  std::size_t at = 0;
  for (int s = 0; s < n; ++s)
    for (std::int64_t i = 0; i < count(s, c.rank()); ++i)
      expect(out[at++] == s * 1000.0 + c.rank() * 10.0 + static_cast<double>(i),
             fmt::format("all_to_all_v element {} from rank {}", i, s));
}

template <dcpp::communicator C>
void all_reduce_ops(C& c) {
  const int n = c.size();
  const std::vector<std::int64_t> v{c.rank(), -c.rank(), 5, static_cast<std::int64_t>(1) << 40};
  auto sum = make(c, v), lo = make(c, v), hi = make(c, v);
  c.all_reduce(sum.span(), dcpp::reduce_op::sum);
  c.all_reduce(lo.span(), dcpp::reduce_op::min);
  c.all_reduce(hi.span(), dcpp::reduce_op::max);
  const std::int64_t rank_sum = static_cast<std::int64_t>(n) * (n - 1) / 2;
  expect(sum.host() == std::vector<std::int64_t>{rank_sum, -rank_sum, 5 * n,
                                                 (static_cast<std::int64_t>(1) << 40) * n},
         "all_reduce sum (int64)");
  expect(lo.host() == std::vector<std::int64_t>{0, -(n - 1), 5, static_cast<std::int64_t>(1) << 40},
         "all_reduce min (int64)");
  expect(hi.host() == std::vector<std::int64_t>{n - 1, 0, 5, static_cast<std::int64_t>(1) << 40},
         "all_reduce max (int64)");
  auto d = make(c, std::vector<double>{0.5 * c.rank(), 1.0});
  c.all_reduce(d.span(), dcpp::reduce_op::sum);
  expect(d.host()[0] == 0.25 * n * (n - 1) && d.host()[1] == n, "all_reduce sum (double, exact)");
  auto f = make(c, std::vector<float>{static_cast<float>(c.rank())});
  c.all_reduce(f.span(), dcpp::reduce_op::max);
  expect(f.host()[0] == static_cast<float>(n - 1), "all_reduce max (float)");
  expect(c.all_reduce_min(static_cast<std::uint64_t>(c.rank()) + 7) == 7, "all_reduce_min");
  expect(c.all_reduce_max(static_cast<std::uint64_t>(c.rank()) + 7) ==
             static_cast<std::uint64_t>(n + 6),
         "all_reduce_max");
}

template <dcpp::communicator C>
void broadcast_every_root(C& c) {
  for (int root = 0; root < c.size(); ++root) {
    auto v = make(c, std::vector<std::int32_t>(5, c.rank() == root ? root * 3 + 1 : -9));
    c.broadcast(v.span(), root);
    for (auto x : v.host())
      expect(x == root * 3 + 1, fmt::format("broadcast from root {}", root));
  }
  c.barrier();
}

//! A ring like the attention kernel's: at each step send the block received last to the next
//! rank; two exchanges in flight (double buffering with distinct tags). After size-1 steps every
//! rank has seen every rank's block.
template <dcpp::communicator C>
void ring_exchange(C& c) {
  const int n = c.size();
  const int next = (c.rank() + 1) % n, previous = (c.rank() + n - 1) % n;
  std::vector<std::int64_t> block(3);
  for (std::size_t i = 0; i < block.size(); ++i)
    block[i] = c.rank() * 10 + static_cast<std::int64_t>(i);
  auto current = make(c, block), incoming = make(c, std::vector<std::int64_t>(3, -1));
  std::vector<int> seen{c.rank()};
  for (int step = 1; step < n; ++step) {
    auto side = make(c, std::vector<std::int64_t>{c.rank(), step});
    auto side_in = make(c, std::vector<std::int64_t>(2, -1));
    auto a = c.exchange(current.cspan(), next, incoming.span(), previous, 0);
    auto b = c.exchange(side.cspan(), next, side_in.span(), previous, 1);
    b.wait();
    a.wait();
    const auto got_side = side_in.host();
    expect(got_side[0] == previous && got_side[1] == step, "second exchange in flight");
    std::swap(current, incoming);
    const auto got = current.host();
    const int origin = static_cast<int>(got[0] / 10);
    expect(origin == (c.rank() - step + n) % n, fmt::format("ring step {} origin", step));
    for (std::size_t i = 0; i < got.size(); ++i)
      expect(got[i] == origin * 10 + static_cast<std::int64_t>(i), "ring payload");
    seen.push_back(origin);
  }
  expect(static_cast<int>(seen.size()) == n, "ring visits every rank");
}

//! Aligned power-of-two groups and contiguous groups of 3: sizes, ranks, collectives inside the
//! group, and the cache (a second call returns a working handle to the same group).
template <dcpp::communicator C>
void sub_groups(C& c) {
  const int n = c.size();
  for (int cp = 1; cp <= n; cp *= 2) {
    const int first = c.rank() / cp * cp;
    if (first + cp > n)
      continue;
    for (int again = 0; again < 2; ++again) {
      C g = c.group_for(first, cp);
      expect(g.size() == cp && g.rank() == c.rank() - first,
             fmt::format("group [{}, {}) size and rank", first, first + cp));
      auto world_rank = make(c, std::vector<std::int64_t>{c.rank()});
      g.all_reduce(world_rank.span(), dcpp::reduce_op::sum);
      expect(world_rank.host()[0] == static_cast<std::int64_t>(cp) * first + cp * (cp - 1) / 2,
             fmt::format("all_reduce inside group [{}, {})", first, first + cp));
      if (cp > 1) {
        auto token = make(c, std::vector<std::int64_t>{c.rank()});
        auto got = make(c, std::vector<std::int64_t>{-1});
        auto h =
            g.exchange(token.cspan(), (g.rank() + 1) % cp, got.span(), (g.rank() + cp - 1) % cp, 3);
        h.wait();
        expect(got.host()[0] == first + (g.rank() + cp - 1) % cp, "exchange inside group");
      }
    }
  }
  if (n >= 3) { // contiguous, not aligned: [0,3), [3,6), ... and a tail group
    const int first = c.rank() / 3 * 3;
    const int cp = std::min(3, n - first);
    C g = c.group_for(first, cp);
    auto one = make(c, std::vector<std::int64_t>{1});
    g.all_reduce(one.span(), dcpp::reduce_op::sum);
    expect(one.host()[0] == cp && g.size() == cp, "contiguous group all_reduce");
  }
  expect_comm_error([&] { (void)c.group_for(c.rank() + 1, 1); },
                    "group_for a group without the caller");
  c.barrier();
}

//! Mismatched sizes raise the same error on every rank; nobody hangs.
template <dcpp::communicator C>
void mismatches_fail_together(C& c) {
  const int n = c.size();
  if (n >= 2) {
    auto in = make(c, std::vector<double>(c.rank() == n - 1 ? 2 : 1, 1.0));
    auto out = make(c, std::vector<double>(in.host().size() * static_cast<std::size_t>(n)));
    expect_comm_error([&] { c.all_gather(in.cspan(), out.span()); },
                      "all_gather with a different count on the last rank");
    // all_to_all_v: rank 0 announces one element more to rank 1 than rank 1 expects.
    std::vector<std::int64_t> sc(static_cast<std::size_t>(n), 1),
        rc(static_cast<std::size_t>(n), 1);
    if (c.rank() == 0)
      sc[1] = 2;
    auto send = make(c, std::vector<double>(static_cast<std::size_t>(n + 1), 2.0));
    auto recv = make(c, std::vector<double>(static_cast<std::size_t>(n), 0.0));
    const std::string message = expect_comm_error(
        [&] {
          c.all_to_all_v(send.cspan(), std::span<const std::int64_t>(sc), recv.span(),
                         std::span<const std::int64_t>(rc));
        },
        "all_to_all_v with inconsistent counts");
    expect(message.find("rank 0 sends 2 elements to rank 1, which expects 1") != std::string::npos,
           "all_to_all_v error names sender, receiver and counts: " + message);
  }
  // agree(): the lowest failing rank's status reaches every rank.
  const bool fails = c.rank() == n / 2 || c.rank() == n - 1;
  const dcpp::status local =
      fails ? dcpp::status::failure(dcpp::status_code::invalid_length,
                                    fmt::format("field 'labels' has {} elements", c.rank()), 4)
            : dcpp::status::success();
  const dcpp::status agreed = dcpp::agree(c, local);
  expect(!agreed.ok() && agreed.code == dcpp::status_code::invalid_length && agreed.sample == 4,
         "agree returns the failing status");
  expect(agreed.message == fmt::format("rank {}: field 'labels' has {} elements", n / 2, n / 2),
         "agree message: " + agreed.message);
  expect(dcpp::agree(c, dcpp::status::success()).ok(), "agree when nobody failed");
  c.barrier();
}

//! Every check, in one fixed order (collectives must be called in the same order on all ranks).
template <dcpp::communicator C>
void run_all(C& c) {
  rank_and_size(c);
  all_gather_fixed(c);
  all_gather_variable(c);
  all_to_all_variable(c);
  all_reduce_ops(c);
  broadcast_every_root(c);
  ring_exchange(c);
  sub_groups(c);
  mismatches_fail_together(c);
}

} // namespace dcpp_test::contract
