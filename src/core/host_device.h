#pragma once
// SBP_HD marks the small per-element / per-row functions that the CUDA kernels use: compiled by
// nvcc they are __host__ __device__, compiled by g++ (the CPU tests of tests/backend/
// cuda_math_test.cpp) they are plain inline functions. So the arithmetic of every kernel is
// tested on machines without a GPU, and only indexing and launch need one. The objectives'
// per-token terms that run on the device too (objective/policy_terms.h) are written the same way.
#if defined(__CUDACC__)
#define SBP_HD __host__ __device__ __forceinline__
#else
#define SBP_HD inline
#endif
