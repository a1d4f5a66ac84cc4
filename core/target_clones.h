#pragma once
// WXTRAIN_CLONES: build a function for AVX-512, AVX2 and baseline x86-64 and pick one at load time
// (GCC's target_clones), so one binary vectorizes well on every x86-64 CPU. Used by the torch-free
// kernel files (ops/kernels/, distributed/kernels/); a no-op on other compilers and CPUs. GCC 12
// does not clone templates: the entry points it marks must be plain functions.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define WXTRAIN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define WXTRAIN_CLONES
#endif
