#pragma once
// WXTRAIN_CLONES: build a function for AVX-512, AVX2 and baseline x86-64 and pick one at load time
// (target_clones, GCC and clang 14+), so one binary vectorizes well on every x86-64 CPU. Used by the
// torch-free kernel files (ops/kernels/, distributed/kernels/); a no-op on other compilers and CPUs.
// GCC 12 does not clone templates: the entry points it marks must be plain functions. Mark a static
// function and call it from the exported one, whose declaration the header gives: clang 14 clones a
// function only when its first declaration carries the attribute (silently not otherwise), and its
// dispatcher is not callable under the plain name from other translation units.
#if defined(__x86_64__) && (defined(__clang__) ? __clang_major__ >= 14 : defined(__GNUC__))
#define WXTRAIN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define WXTRAIN_CLONES
#endif
