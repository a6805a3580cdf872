// libFuzzer target: the text/JSON batch reader (dcpp-plan's INPUT) and, when it accepts the
// input, the option checks and planning of what it read at a small world. Any input must give
// lengths or a dcpp::error; never a crash, a hang or another exception.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "dcpp/io/batch_input.hpp"
#include "dcpp/planner/options.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::istringstream in(text);
  try {
    const auto batch = dcpp::read_batch(in, "fuzz");
    dcpp::plan_options o;
    o.world_size = batch.world_size.value_or(8);
    o.max_tokens_per_rank = batch.max_tokens_per_rank.value_or(4096);
    o.min_cp = batch.min_cp.value_or(1);
    o.microbatch_multiple = batch.microbatch_multiple.value_or(1);
    (void)dcpp::check_problem(o, batch.lengths);
  } catch (const dcpp::error&) {
  }
  return 0;
}
