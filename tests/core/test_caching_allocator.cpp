// Tests for include/dcpp/core/caching_allocator.hpp over a host upstream that counts and checks
// what it is given: seeded random allocate/free sequences against a model of the cache (size
// classes, reuse, the cached-bytes cap), blocks that never overlap while held, an upstream out of
// memory (cache given back, one retry, then the failure), bad requests, and nothing leaked.
#include "../support.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <random>
#include <vector>

#include "dcpp/core/caching_allocator.hpp"

namespace {

//! Host memory that counts live blocks and bytes, checks each block comes back with its size,
//! and can be told to fail once it holds `limit` bytes.
struct counting_upstream {
  struct ledger {
    std::map<void*, std::size_t> live;
    std::size_t bytes = 0, limit = SIZE_MAX, calls = 0, bad_returns = 0;
  };
  ledger* book;
  void* allocate(std::size_t n) {
    ++book->calls;
    if (book->bytes + n > book->limit)
      throw std::bad_alloc();
    void* p = std::malloc(n);
    if (p == nullptr)
      throw std::bad_alloc();
    book->live.emplace(p, n);
    book->bytes += n;
    return p;
  }
  void deallocate(void* p, std::size_t n) {
    const auto it = book->live.find(p);
    if (it == book->live.end() || it->second != n) {
      ++book->bad_returns;
      return;
    }
    book->bytes -= n;
    book->live.erase(it);
    std::free(p);
  }
};
static_assert(dcpp::upstream_resource<counting_upstream>);
using pool_type = dcpp::caching_allocator<counting_upstream>;

} // namespace

TEST_CASE("caching_allocator: size classes are powers of two from min_block") {
  CHECK(pool_type::size_class(0) == 512);
  CHECK(pool_type::size_class(1) == 512);
  CHECK(pool_type::size_class(512) == 512);
  CHECK(pool_type::size_class(513) == 1024);
  CHECK(pool_type::size_class((std::size_t{1} << 40) + 1) == std::size_t{1} << 41);
}

TEST_CASE("caching_allocator: 40 seeded sequences against a model; held blocks never overlap") {
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    counting_upstream::ledger book;
    const std::size_t cap = std::size_t{1} << (12 + seed % 8); // 4 KiB .. 512 KiB cached
    {
      pool_type pool(counting_upstream{&book}, cap);
      struct held {
        char* p;
        std::size_t bytes;
        unsigned char tag;
      };
      std::vector<held> live;
      std::multimap<std::size_t, int> model_free; // size class -> count of cached blocks
      std::size_t model_cached = 0, fresh = 0;
      for (int step = 0; step < 600; ++step) {
        if (live.empty() || rng() % 5 < 3) {
          const std::size_t bytes = rng() % 3 == 0 ? rng() % 600 : rng() % 70000;
          const std::size_t cls = pool_type::size_class(bytes);
          const std::size_t calls_before = book.calls;
          char* p = pool.allocate(static_cast<std::ptrdiff_t>(bytes));
          if (auto it = model_free.find(cls); it != model_free.end()) {
            model_free.erase(it);
            model_cached -= cls;
            CHECK(book.calls == calls_before); // a cached block, no upstream call
          } else {
            ++fresh;
            CHECK(book.calls == calls_before + 1);
          }
          const auto tag = static_cast<unsigned char>(rng());
          std::memset(p, tag, bytes);
          live.push_back({p, bytes, tag});
        } else {
          const std::size_t i = rng() % live.size();
          const held h = live[i];
          // nothing else wrote into the block while it was held
          CHECK(std::all_of(h.p, h.p + h.bytes,
                            [&](char c) { return static_cast<unsigned char>(c) == h.tag; }));
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
          pool.deallocate(h.p, h.bytes);
          const std::size_t cls = pool_type::size_class(h.bytes);
          if (model_cached + cls <= cap) {
            model_free.emplace(cls, 0);
            model_cached += cls;
          }
        }
        REQUIRE(pool.cached_bytes() == model_cached);
        REQUIRE(pool.cached_bytes() <= cap);
        REQUIRE(book.live.size() == pool.upstream_blocks());
      }
      CHECK(pool.upstream_allocations() == fresh);
      for (const held& h : live) {
        CHECK(std::all_of(h.p, h.p + h.bytes,
                          [&](char c) { return static_cast<unsigned char>(c) == h.tag; }));
        pool.deallocate(h.p, h.bytes);
      }
      CHECK(pool.in_use_bytes() == 0);
    } // the destructor gives every cached block back
    CHECK(book.live.empty());
    CHECK(book.bytes == 0);
    CHECK(book.bad_returns == 0);
  }
}

TEST_CASE("caching_allocator: out of memory upstream gives the cache back and retries once") {
  counting_upstream::ledger book;
  book.limit = 4096;
  pool_type pool(counting_upstream{&book});
  char* a = pool.allocate(2048);
  char* b = pool.allocate(1024);
  pool.deallocate(a);
  pool.deallocate(b);
  CHECK(pool.cached_bytes() == 3072);
  // 4096 does not fit beside the cached 3072: the cache goes back and the retry succeeds
  char* c = pool.allocate(4096);
  CHECK(pool.cached_bytes() == 0);
  CHECK(book.bytes == 4096);
  // nothing cached, nothing to give back: the failure propagates and nothing changes
  CHECK_THROWS_AS((void)pool.allocate(512), std::bad_alloc);
  CHECK(pool.in_use_bytes() == 4096);
  pool.deallocate(c);
  pool.release();
  CHECK(book.live.empty());
}

TEST_CASE("caching_allocator: bad requests and foreign pointers") {
  counting_upstream::ledger book;
  pool_type pool(counting_upstream{&book});
  CHECK_THROWS_AS((void)pool.allocate(-1), std::bad_alloc);
  CHECK_THROWS_AS((void)pool.allocate(PTRDIFF_MAX), std::bad_alloc);
  CHECK(book.calls == 0);
  char* zero = pool.allocate(0); // a block all the same, of the smallest class
  CHECK(zero != nullptr);
  char other[8];
  pool.deallocate(other, 8); // not the pool's: ignored, not cached
  pool.deallocate(nullptr, 0);
  CHECK(pool.cached_bytes() == 0);
  pool.deallocate(zero, 0);
  pool.deallocate(zero, 0); // twice: the second is ignored
  CHECK(pool.cached_bytes() == 512);
  char* again = pool.allocate(100);
  CHECK(again == zero); // the cached block again
  pool.deallocate(again);
}
