// The CUDA devices of this machine, for ./dev.sh gpu and tests/gpu/needs_gpus.sh: one line per
// device (name, compute capability, memory), or with --count the count alone. Exits 77 when there
// is none ("no CUDA device").
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  const bool count_only = argc > 1 && std::strcmp(argv[1], "--count") == 0;
  if (e != cudaSuccess || devices == 0) {
    if (count_only)
      std::puts("0");
    else
      std::printf("no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    return 77;
  }
  if (count_only) {
    std::printf("%d\n", devices);
    return 0;
  }
  for (int d = 0; d < devices; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess)
      continue;
    std::printf("device %d: %s, sm_%d%d, %zu MiB\n", d, prop.name, prop.major, prop.minor,
                prop.totalGlobalMem >> 20);
  }
  return 0;
}
