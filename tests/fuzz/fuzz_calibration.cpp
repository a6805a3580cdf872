// libFuzzer target: the calibration CSV reader and the least-squares fit of what it read, and
// the fitted cost at a few points: any input must give a fit or a dcpp::error.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "dcpp/io/batch_input.hpp"
#include "dcpp/planner/calibrated_cost.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 8192) // the fit is O(rows x features^2): keep each run short
    return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::istringstream in(text);
  try {
    const auto rows = dcpp::read_calibration(in, "fuzz.csv");
    const auto fit = dcpp::calibrated_cost::fit(rows, 8);
    for (const std::int32_t cp : {1, 2, 8, 16})
      (void)fit.cost(4096, cp);
    const std::int64_t lengths[] = {1, 1000, 100000};
    const std::int32_t smallest[] = {1, 1, 2};
    const std::int32_t sizes[] = {1, 2, 4};
    fit.check_lengths(lengths, smallest, sizes);
  } catch (const dcpp::error&) {
  }
  return 0;
}
