// libFuzzer target: the JSON workload reader (a `{` is put first, so that every input takes the
// JSON path of read_batch: seqlens and the settings beside it). Any input must give a batch or a
// dcpp::error.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "dcpp/io/batch_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string text = "{";
  text.append(reinterpret_cast<const char*>(data), size);
  std::istringstream in(text);
  try {
    (void)dcpp::read_batch(in, "fuzz.json");
  } catch (const dcpp::error&) {
  }
  return 0;
}
