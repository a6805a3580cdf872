// Prints the launch configuration of every shipped ring attention kernel, one line each:
// "<part of the mangled kernel name> <threads> <dynamic shared bytes>", for tools/sass_report.py
// (`./dev.sh sass`), which reads the machine code but cannot see the launch.
#include <cstdio>

#include "dcpp/kernels/attention/ring_attention.hpp"

namespace {

template <class T>
const char* mangled_type();
template <>
const char* mangled_type<float>() {
  return "f";
}
template <>
const char* mangled_type<dcpp::half>() {
  return "NS_4half";
}
template <>
const char* mangled_type<dcpp::bfloat16>() {
  return "NS_8bfloat16";
}

template <int DQK, int DV, class T>
void print() {
  using cfg = dcpp::kernels::attention_tile<DQK, DV, T>;
  const char* t = mangled_type<T>();
  std::printf("attention_forward_kernelILi%dELi%dE%sE %d %zu\n", DQK, DV, t, cfg::threads,
              cfg::forward_shared);
  std::printf("attention_dq_kernelILi%dELi%dE%sE %d %zu\n", DQK, DV, t, cfg::threads,
              cfg::dq_shared);
  std::printf("attention_dkv_kernelILi%dELi%dE%sE %d %zu\n", DQK, DV, t, cfg::threads,
              cfg::dkv_shared);
}

template <int DQK, int DV>
void print_types() {
  print<DQK, DV, float>();
  print<DQK, DV, dcpp::half>();
  print<DQK, DV, dcpp::bfloat16>();
}

} // namespace

int main() {
  print_types<64, 64>();
  print_types<96, 96>();
  print_types<128, 128>();
  print_types<192, 128>();
  print_types<192, 192>();
  print_types<256, 256>();
  return 0;
}
