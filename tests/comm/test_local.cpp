// Tests for include/dcpp/comm/local.hpp: the contract suite on 1-8 threads, plus the local
// backend's own failure modes.
#include "../support.hpp"

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "contract.hpp"
#include "dcpp/comm/local.hpp"

TEST_CASE("local_communicator: the communicator contract, 1 to 8 ranks") {
  for (int n = 1; n <= 8; ++n) {
    CAPTURE(n);
    CHECK_NOTHROW(
        dcpp::run_local(n, [](dcpp::local_communicator& c) { dcpp_test::contract::run_all(c); }));
  }
}

TEST_CASE("local_communicator: every rank gets the same error on mismatched calls") {
  std::mutex m;
  std::vector<std::string> messages(3);
  dcpp::run_local(3, [&](dcpp::local_communicator& c) {
    try {
      if (c.rank() == 1)
        c.barrier();
      else
        (void)c.all_reduce_max(1);
    } catch (const dcpp::error& e) {
      std::lock_guard lock(m);
      messages[static_cast<std::size_t>(c.rank())] = e.what();
    }
  });
  for (const auto& message : messages)
    CHECK(message == "local_communicator: rank 0 called all_reduce while rank 1 called barrier");
}

TEST_CASE("local_communicator: a rank failing alone does not hang the others") {
  std::atomic<int> peer_errors{0};
  CHECK_THROWS_WITH_AS(
      dcpp::run_local(4,
                      [&](dcpp::local_communicator& c) {
                        if (c.rank() == 2)
                          throw std::runtime_error("loader crashed");
                        try {
                          c.barrier();
                        } catch (const dcpp::error& e) {
                          if (std::string(e.what()).find("rank 2 failed: loader crashed") !=
                              std::string::npos)
                            ++peer_errors;
                          throw;
                        }
                      }),
      "loader crashed", std::runtime_error);
  CHECK(peer_errors == 3);
}

TEST_CASE("local_communicator: exchange checks the size of the matching send") {
  dcpp::run_local(2, [](dcpp::local_communicator& c) {
    std::vector<int> send(c.rank() == 0 ? 3 : 4, 1), recv(4, 0);
    auto h =
        c.exchange(std::span<const int>(send), 1 - c.rank(), std::span<int>(recv), 1 - c.rank(), 5);
    if (c.rank() == 1)
      CHECK_THROWS_WITH_AS(h.wait(), doctest::Contains("rank 0 sent 12 bytes with tag 5"),
                           dcpp::error);
    else
      CHECK_NOTHROW(h.wait());
  });
}

TEST_CASE("local_communicator: argument errors name the values") {
  dcpp::run_local(2, [](dcpp::local_communicator& c) {
    std::vector<double> in(2), out(3);
    CHECK_THROWS_WITH_AS(c.all_gather(std::span<const double>(in), std::span<double>(out)),
                         doctest::Contains("output holds 3 elements, expected 4"), dcpp::error);
    std::vector<int> v(1);
    CHECK_THROWS_WITH_AS(c.broadcast(std::span<int>(v), 2),
                         doctest::Contains("root 2 is outside [0, 2)"), dcpp::error);
    CHECK_THROWS_WITH_AS((void)c.group_for(1, 2), doctest::Contains("group [1, 3) must lie"),
                         dcpp::error);
    CHECK_THROWS_AS(dcpp::run_local(0, [](dcpp::local_communicator&) {}), dcpp::error);
  });
}
