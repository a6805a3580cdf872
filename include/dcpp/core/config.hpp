// Execution-space and contract macros shared by host and device code (device-safe).
#pragma once

// dcpp is C++20 (concepts, std::span, designated initialisers): say so before the first
// "'concept' does not name a type".
#if (defined(_MSVC_LANG) ? _MSVC_LANG : __cplusplus) < 202002L
#error                                                                                             \
    "dcpp needs C++20: compile with -std=c++20 (CMake: link dcpp::dcpp, which requires cxx_std_20; Meson: cpp_std=c++20); see docs/install.md"
#endif

#if defined(__CUDACC__)
#define DCPP_HOST_DEVICE __host__ __device__
#define DCPP_KERNEL __global__
#else
#define DCPP_HOST_DEVICE
#define DCPP_KERNEL
#endif

//! Forced inlining of small device helpers (a call would spill registers at the call boundary).
#if defined(__CUDACC__)
#define DCPP_FORCE_INLINE __forceinline__
#else
#define DCPP_FORCE_INLINE inline
#endif

//! Full unrolling of a loop with a compile-time trip count, so that register arrays indexed by
//! its counter stay in registers on the device (no local memory).
#if defined(__CUDA_ARCH__)
#define DCPP_UNROLL _Pragma("unroll")
#elif defined(__CUDACC__) // nvcc's host pass: its front end rejects GCC's pragma; not needed there
#define DCPP_UNROLL
#else
#define DCPP_UNROLL _Pragma("GCC unroll 16")
#endif

//! A loop the device compiler must not unroll (a long reduction whose unrolled form would keep
//! too many addresses live and spill).
#if defined(__CUDA_ARCH__)
#define DCPP_NO_UNROLL _Pragma("unroll 1")
#else
#define DCPP_NO_UNROLL
#endif

//! Contract check. Off in release builds unless DCPP_ENABLE_CONTRACTS is defined; tests define
//! DCPP_CONTRACT_VIOLATION to throw so that contracts are testable.
#ifndef DCPP_CONTRACT_VIOLATION
#include <cstdio>
#include <cstdlib>
#define DCPP_CONTRACT_VIOLATION(condition_text, file, line)                                        \
  (std::fprintf(stderr, "dcpp: contract violated: %s at %s:%d\n", condition_text, file, line),     \
   std::abort())
#endif

#if !defined(DCPP_ENABLE_CONTRACTS) && !defined(NDEBUG)
#define DCPP_ENABLE_CONTRACTS 1
#endif

#if defined(DCPP_ENABLE_CONTRACTS) && DCPP_ENABLE_CONTRACTS && !defined(__CUDA_ARCH__)
#define DCPP_EXPECTS(condition)                                                                    \
  ((condition) ? void(0) : void(DCPP_CONTRACT_VIOLATION(#condition, __FILE__, __LINE__)))
#else
#define DCPP_EXPECTS(condition) void(0)
#endif
