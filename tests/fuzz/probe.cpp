// Configure-time probe: clang++ -fsanitize=fuzzer links (libFuzzer is installed).
#include <cstddef>
#include <cstdint>
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t*, std::size_t) {
  return 0;
}
