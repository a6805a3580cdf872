// Tests for include/dcpp/route/device_router.hpp and device_head_parallel.hpp on Thrust's host
// policy (route_ops.hpp under thrust::cpp::par, host vectors) and the local backend: the same
// seeded workloads as the host router's and the host exchange's tests, every buffer compared
// with theirs bit for bit, the inverse route too; the index maps and block layout on their own.
#include "../support.hpp"

#include <thrust/system/cpp/execution_policy.h>

#include <cstdlib>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "../../examples/trainer/embedding_csr.hpp"
#include "dcpp/comm/local.hpp"
#include "dcpp/core/caching_allocator.hpp"
#include "dcpp/route/device_head_parallel.hpp"
#include "dcpp/route/device_router.hpp"
#include "dcpp/route/route_ops.hpp"
#include "head_parallel_check.hpp"
#include "round_trip.hpp"

namespace rt = dcpp_test::route;
namespace hp = dcpp_test::head_parallel;

namespace {
using host_ops = dcpp::thrust_route_ops<decltype(thrust::cpp::par)>;
template <class T>
using host_buffer = std::vector<T>;
template <class C>
using twin_of =
    dcpp::device_router<host_ops, host_buffer, C, rt::token_tag, dcpp::fields::token_ids,
                        dcpp::fields::labels, dcpp::fields::loss_mask, rt::advantage>;

//! Both routers on one workload: every micro-batch's buffer and the inverse route, bit for bit.
template <class C>
void compare(C& comm, std::uint64_t seed) {
  const rt::workload w = rt::make_workload(seed, comm.size());
  const rt::shard_type shard = rt::make_shard(w, comm.rank(), seed);
  dcpp::planner<dcpp::length_squared_cost> planner(w.options);
  auto host = dcpp::plan_step(planner, comm, shard);
  twin_of<C> twin(host_ops{thrust::cpp::par}, comm, host.get_plan(), host.origins(),
                  w.options.padding_unit);
  REQUIRE(twin.shard_tokens() == host.shard_tokens());
  typename twin_of<C>::arrays_type arrays;
  arrays.values = shard.values;
  for (std::size_t m = 0; m < host.microbatches(); ++m) {
    CAPTURE(m);
    const auto expected = host.dispatch(m, shard);
    const auto got = twin.dispatch(m, arrays);
    CHECK(got.layout == expected.layout);
    CHECK(got.position_ids == expected.position_ids);
    CHECK(got.is_real == expected.is_real);
    CHECK(got.fields.values == expected.values);
    // a stage's own fields alone, and the metadata alone
    const auto last_stage =
        host.template dispatch_only<dcpp::fields::labels, dcpp::fields::loss_mask>(m, shard);
    CHECK(last_stage.template get<dcpp::fields::labels>() ==
          expected.template get<dcpp::fields::labels>());
    CHECK(last_stage.template get<dcpp::fields::loss_mask>() ==
          expected.template get<dcpp::fields::loss_mask>());
    CHECK(last_stage.template get<dcpp::fields::token_ids>().empty());
    CHECK(last_stage.position_ids == expected.position_ids);
    const auto first_stage = twin.template dispatch_only<dcpp::fields::token_ids>(m, arrays);
    CHECK(first_stage.fields.template get<dcpp::fields::token_ids>() ==
          expected.template get<dcpp::fields::token_ids>());
    CHECK(first_stage.fields.template get<rt::token_tag>().empty());
    const auto metadata = twin.layout_only(m);
    CHECK(metadata.layout == expected.layout);
    CHECK(metadata.position_ids == expected.position_ids);
    CHECK(metadata.is_real == expected.is_real);
    // the inverse route of a float per token (its position, a value every slot differs by)
    std::vector<float> out(static_cast<std::size_t>(expected.tokens()));
    for (std::size_t t = 0; t < out.size(); ++t)
      out[t] =
          0.5f * static_cast<float>(expected.position_ids[t]) + static_cast<float>(comm.rank());
    std::vector<float> host_back(static_cast<std::size_t>(host.shard_tokens()), -1.0f);
    std::vector<float> twin_back(host_back);
    host.combine(m, std::span<const float>(out), std::span<float>(host_back));
    twin.combine(m, out, twin_back);
    CHECK(twin_back == host_back);
  }
  // the block layouts are made once per field set and kept: a second pass, backwards, with an
  // inverse route of another value size first, gives the same buffers again
  for (std::size_t m = host.microbatches(); m-- > 0;) {
    CAPTURE(m);
    const auto expected = host.dispatch(m, shard);
    std::vector<double> out(static_cast<std::size_t>(expected.tokens()));
    for (std::size_t t = 0; t < out.size(); ++t)
      out[t] = static_cast<double>(expected.position_ids[t]) - 0.25 * comm.rank();
    std::vector<double> host_back(static_cast<std::size_t>(host.shard_tokens()), -1.0);
    std::vector<double> twin_back(host_back);
    host.combine(m, std::span<const double>(out), std::span<double>(host_back));
    twin.combine(m, out, twin_back);
    CHECK(twin_back == host_back);
    CHECK(twin.template dispatch_only<dcpp::fields::token_ids>(m, arrays)
              .fields.template get<dcpp::fields::token_ids>() ==
          expected.template get<dcpp::fields::token_ids>());
    CHECK(twin.dispatch(m, arrays).fields.values == expected.values);
  }
}
} // namespace

TEST_CASE("device_router: the host router's buffers bit for bit, 600 workloads on 1-8 ranks") {
  for (std::uint64_t seed = 0; seed < 600; ++seed) {
    const int world = 1 + static_cast<int>(seed % 8);
    CAPTURE(seed);
    dcpp::run_local(world, [&](dcpp::local_communicator& c) { compare(c, seed); });
  }
}

TEST_CASE("make_field_blocks: per peer, per field, blocks aligned to 16 bytes") {
  const std::vector<std::int64_t> tokens{3, 0, 5};
  const std::vector<std::size_t> sizes{8, 1, 4};
  const dcpp::field_blocks b = dcpp::make_field_blocks(tokens, sizes);
  // peer 0: 24 -> 32, 3 -> 16, 12 -> 16; peer 1: nothing; peer 2: 40 -> 48, 5 -> 16, 20 -> 32
  CHECK(b.bytes == std::vector<std::int64_t>{64, 0, 96});
  CHECK(b.total == 160);
  CHECK(b.offset[0] == std::vector<std::int64_t>{0, 64, 64});
  CHECK(b.offset[1] == std::vector<std::int64_t>{32, 64, 112});
  CHECK(b.offset[2] == std::vector<std::int64_t>{48, 64, 128});
  for (const auto& field : b.offset)
    for (const std::int64_t o : field)
      CHECK(o % dcpp::route_block_alignment == 0);
}

TEST_CASE("make_route_maps: every segment's tokens once, peers in order, local tokens apart") {
  dcpp::rank_route r;
  r.rank = 1;
  r.send = {{{0, 4, 2}}, {{2, 0, 3}}, {{5, 1, 1}, {7, 9, 2}}};
  r.recv = {{{0, 10, 2}}, {}, {{0, 20, 1}}};
  const dcpp::route_maps m = dcpp::make_route_maps(r);
  CHECK(m.send_tokens == std::vector<std::int64_t>{2, 0, 3});
  CHECK(m.send_source == std::vector<std::int64_t>{0, 1, 5, 7, 8});
  CHECK(m.send_peer == std::vector<std::int32_t>{0, 0, 2, 2, 2});
  CHECK(m.send_slot == std::vector<std::int64_t>{0, 1, 0, 1, 2});
  CHECK(m.local_source == std::vector<std::int64_t>{2, 3, 4});
  CHECK(m.local_dest == std::vector<std::int64_t>{0, 1, 2});
  CHECK(m.recv_tokens == std::vector<std::int64_t>{2, 0, 1});
  CHECK(m.recv_dest == std::vector<std::int64_t>{10, 11, 20});
  CHECK(m.recv_peer == std::vector<std::int32_t>{0, 0, 2});
  CHECK(m.recv_slot == std::vector<std::int64_t>{0, 1, 0});
}

TEST_CASE("device_router: a field of the wrong size fails every rank with its message") {
  std::vector<std::string> messages(3);
  std::mutex mu;
  dcpp::run_local(3, [&](dcpp::local_communicator& c) {
    const rt::workload w = rt::make_workload(5, c.size());
    const rt::shard_type shard = rt::make_shard(w, c.rank(), 5);
    dcpp::planner<dcpp::length_squared_cost> planner(w.options);
    auto host = dcpp::plan_step(planner, c, shard);
    twin_of<dcpp::local_communicator> twin(host_ops{thrust::cpp::par}, c, host.get_plan(),
                                           host.origins());
    typename twin_of<dcpp::local_communicator>::arrays_type arrays;
    arrays.values = shard.values;
    if (c.rank() == 1)
      arrays.get<dcpp::fields::labels>().push_back(3);
    try {
      (void)twin.dispatch(0, arrays);
    } catch (const dcpp::error& e) {
      std::lock_guard lock(mu);
      messages[static_cast<std::size_t>(c.rank())] = e.what();
    }
  });
  for (const auto& m : messages)
    CHECK(m.starts_with("rank 1: field 'labels' holds"));
}

TEST_CASE("cp2hp / hp2cp on the Thrust backend: the host exchange's results bit for bit") {
  std::int32_t shared = 0;
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    const int world = 1 + static_cast<int>(seed % 8);
    CAPTURE(seed);
    dcpp::run_local(world, [&](dcpp::local_communicator& c) {
      const hp::group_case g = hp::rank_group(seed, world, c.rank());
      const std::vector<double> local = hp::zigzag_slice(g, g.whole);
      const auto hp_size = static_cast<std::size_t>(dcpp::hp_elements(g.layout, g.shape));
      std::vector<double> host(hp_size), twin(hp_size, -3.0);
      dcpp::cp2hp(c, g.layout, g.shape, std::span<const double>(local), std::span<double>(host));
      host_ops ops{thrust::cpp::par};
      dcpp::cp2hp<host_buffer>(ops, c, g.layout, g.shape, std::span<const double>(local),
                               std::span<double>(twin));
      CHECK(twin == host);
      std::vector<double> back_host(local.size()), back_twin(local.size(), -3.0);
      dcpp::hp2cp(c, g.layout, g.shape, std::span<const double>(host),
                  std::span<double>(back_host));
      dcpp::hp2cp<host_buffer>(ops, c, g.layout, g.shape, std::span<const double>(twin),
                               std::span<double>(back_twin));
      CHECK(back_twin == back_host);
      CHECK(back_twin == local);
    });
    for (std::int32_t first = 0; const std::int32_t cp : hp::group_sizes(seed, world)) {
      shared += hp::make_group(seed, first, cp, 0).shape.heads < cp ? 1 : 0;
      first += cp;
    }
  }
  CHECK(shared > 20);
}

TEST_CASE("hp2cp on the Thrust backend: summing shared heads gives the host path's sums bit for "
          "bit") {
  std::int32_t shared = 0;
  for (std::uint64_t seed = 300; seed < 600; ++seed) {
    const int world = 1 + static_cast<int>(seed % 8);
    CAPTURE(seed);
    dcpp::run_local(world, [&](dcpp::local_communicator& c) {
      const hp::group_case g = hp::rank_group(seed, world, c.rank());
      const std::vector<double> local = hp::zigzag_slice(g, g.whole);
      std::vector<double> in(static_cast<std::size_t>(dcpp::hp_elements(g.layout, g.shape)));
      dcpp::cp2hp(c, g.layout, g.shape, std::span<const double>(local), std::span<double>(in));
      in = hp::holder_weighted(g.layout, in);
      std::vector<double> host(local.size(), -3.0), twin(local.size(), -5.0);
      dcpp::hp2cp(c, g.layout, g.shape, std::span<const double>(in), std::span<double>(host),
                  dcpp::replica_merge::sum);
      host_ops ops{thrust::cpp::par};
      dcpp::hp2cp<host_buffer>(ops, c, g.layout, g.shape, std::span<const double>(in),
                               std::span<double>(twin), dcpp::replica_merge::sum);
      CHECK(twin == host);
      CHECK(twin == hp::holder_weighted_sum(g, local));
      // float, the trainers' type, takes the same path
      const std::vector<float> in_f(in.begin(), in.end());
      std::vector<float> host_f(local.size()), twin_f(local.size(), -5.0f);
      dcpp::hp2cp(c, g.layout, g.shape, std::span<const float>(in_f), std::span<float>(host_f),
                  dcpp::replica_merge::sum);
      dcpp::hp2cp<host_buffer>(ops, c, g.layout, g.shape, std::span<const float>(in_f),
                               std::span<float>(twin_f), dcpp::replica_merge::sum);
      CHECK(twin_f == host_f);
    });
    for (std::int32_t first = 0; const std::int32_t cp : hp::group_sizes(seed, world)) {
      shared += hp::make_group(seed, first, cp, 0).shape.heads < cp ? 1 : 0;
      first += cp;
    }
  }
  CHECK(shared > 20);
}

namespace {
//! A backend without `add_rows`: summing is refused.
struct copy_only_ops : host_ops {
  template <class T>
  void add_rows(std::int64_t, std::int64_t, const std::int64_t*, const std::int64_t*, const T*,
                T*) = delete;
};
} // namespace

TEST_CASE("hp2cp on a backend that cannot add the element type: summing shared heads is refused "
          "on every rank") {
  static_assert(!dcpp::adds_rows_of<copy_only_ops, float>);
  static_assert(dcpp::adds_rows_of<host_ops, float>);
  std::vector<std::string> messages(4);
  std::mutex mu;
  dcpp::run_local(4, [&](dcpp::local_communicator& c) {
    dcpp::thd_layout l;
    l.first_rank = 0;
    l.cp = 4;
    l.rank_in_group = c.rank();
    l.samples = {0};
    l.cu_seqlens = {0, 8};
    l.cu_seqlens_padded = {0, 8};
    const dcpp::head_shape shape{2, 3}; // two heads on four ranks: each held twice
    std::vector<float> in(static_cast<std::size_t>(dcpp::hp_elements(l, shape)));
    std::vector<float> out(static_cast<std::size_t>(dcpp::cp_elements(l, shape)));
    copy_only_ops ops{{thrust::cpp::par}};
    try {
      dcpp::hp2cp<host_buffer>(ops, c, l, shape, std::span<const float>(in), std::span<float>(out),
                               dcpp::replica_merge::sum);
    } catch (const dcpp::error& e) {
      std::lock_guard lock(mu);
      messages[static_cast<std::size_t>(c.rank())] = e.what();
    }
  });
  for (const auto& m : messages)
    CHECK(m == "rank 0: hp2cp: replica_merge::sum needs a backend that adds values of this "
               "element type (cuda_route_ops: float and double)");
}

namespace {
//! Host memory for a caching allocator in the tests.
struct host_memory {
  void* allocate(std::size_t n) {
    void* p = std::malloc(n);
    if (p == nullptr)
      throw std::bad_alloc();
    return p;
  }
  void deallocate(void* p, std::size_t) { std::free(p); }
};
} // namespace

TEST_CASE("the GPU trainer's embedding index on thrust::cpp::par: the host counting sort's, with "
          "the algorithms' scratch from a caching allocator or without") {
  dcpp::caching_allocator<host_memory> pool;
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    CAPTURE(seed);
    dcpp::workload::rng r(seed);
    const auto tokens = r.uniform_int(0, 300);
    const int vocab = static_cast<int>(r.uniform_int(1, 40));
    std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens));
    std::vector<std::uint8_t> real(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      ids[i] = static_cast<std::int32_t>(r.uniform_int(0, vocab - 1));
      real[i] = r.uniform_int(0, 4) == 0 ? 0 : 1;
    }
    // the host's counting sort, as gpu_trainer built it before
    std::vector<std::int64_t> offsets(static_cast<std::size_t>(vocab) + 1, 0), sources;
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (real[i] != 0)
        ++offsets[static_cast<std::size_t>(ids[i]) + 1];
    for (int t = 0; t < vocab; ++t)
      offsets[static_cast<std::size_t>(t) + 1] += offsets[static_cast<std::size_t>(t)];
    sources.resize(static_cast<std::size_t>(offsets.back()));
    std::vector<std::int64_t> cursor(offsets.begin(), offsets.end() - 1);
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (real[i] != 0)
        sources[static_cast<std::size_t>(cursor[static_cast<std::size_t>(ids[i])]++)] =
            static_cast<std::int64_t>(i);
    std::vector<std::int64_t> got_offsets(offsets.size(), -1), got_sources(ids.size(), -1);
    std::vector<std::int32_t> keys(ids.size());
    const std::int64_t count =
        trainer::embedding_csr(thrust::cpp::par, ids.data(), real.data(), tokens, vocab,
                               got_offsets.data(), got_sources.data(), keys.data());
    CHECK(count == offsets.back());
    CHECK(got_offsets == offsets);
    got_sources.resize(static_cast<std::size_t>(count));
    CHECK(got_sources == sources);
    // the same through the pool (gpu_trainer's form: thrust::cuda::par_nosync(pool).on(stream))
    std::vector<std::int64_t> pooled_offsets(offsets.size(), -1), pooled_sources(ids.size(), -1);
    CHECK(trainer::embedding_csr(thrust::cpp::par(pool), ids.data(), real.data(), tokens, vocab,
                                 pooled_offsets.data(), pooled_sources.data(),
                                 keys.data()) == count);
    CHECK(pooled_offsets == offsets);
    pooled_sources.resize(static_cast<std::size_t>(count));
    CHECK(pooled_sources == sources);
    CHECK(pool.in_use_bytes() == 0); // every scratch block came back
  }
  // the sorts took scratch space through the pool, and most of it came from its cache
  INFO(pool.requests() << " requests, " << pool.upstream_allocations() << " upstream");
  CHECK(pool.requests() >= 100);
  CHECK(pool.upstream_allocations() * 10 <= pool.requests());
}
