// The embedding gradient's index, built where the token ids are: for each vocabulary row, the
// buffer positions of the real tokens with that id, in token order (what the row-gather-sum of
// the embedding backward reads). Thrust algorithms under an execution policy: thrust::cpp::par on
// host arrays in the tests, Thrust's CUDA policy in layers.cu, so the GPU trainer never copies
// ids back to the host.
#pragma once

#include <cstdint>

#include <thrust/binary_search.h>
#include <thrust/copy.h>
#include <thrust/gather.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>

#include "dcpp/core/config.hpp"

namespace trainer {

struct is_real_token {
  DCPP_HOST_DEVICE bool operator()(std::uint8_t real) const { return real != 0; }
};

//! offsets[v] .. offsets[v + 1]: the entries of `sources` (buffer positions) of the real tokens
//! whose id is v, ascending; `offsets` holds vocab + 1 values, `sources` and `keys` room for
//! `tokens`. Returns the real tokens' count.
template <class Policy>
std::int64_t embedding_csr(Policy policy, const std::int32_t* ids, const std::uint8_t* real,
                           std::int64_t tokens, int vocab, std::int64_t* offsets,
                           std::int64_t* sources, std::int32_t* keys) {
  const thrust::counting_iterator<std::int64_t> first(0);
  std::int64_t* end =
      thrust::copy_if(policy, first, first + tokens, real, sources, is_real_token{});
  const std::int64_t count = end - sources;
  thrust::gather(policy, sources, end, ids, keys);
  thrust::stable_sort_by_key(policy, keys, keys + count, sources); // token order kept per id
  thrust::lower_bound(policy, keys, keys + count, thrust::counting_iterator<std::int32_t>(0),
                      thrust::counting_iterator<std::int32_t>(vocab + 1), offsets);
  return count;
}

} // namespace trainer
