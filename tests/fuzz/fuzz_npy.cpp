// libFuzzer target: the strict .npy reader, the tools' cu_seqlens rule and the conversions:
// any input must give an array or a dcpp::error, and never allocate what a header claims
// before the bytes are there.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "dcpp/io/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const auto a = dcpp::parse_npy(bytes, "fuzz.npy");
    if (a.is_float())
      (void)a.as<float>("fuzz");
    else
      (void)dcpp::cu_seqlens_from_npy(a, a.elements() > 0 ? 7 : 0, "--cu-seqlens");
  } catch (const dcpp::error&) {
  }
  return 0;
}
