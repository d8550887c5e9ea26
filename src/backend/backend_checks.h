#pragma once
// The argument checks of Backend::attention_forward / attention_backward (backend.cpp), for the
// one other entry point to an implementation: the CPU attention kernels (cpu/attention.h) are
// also called directly, by their own tests and by tools/bench, and must reject what the
// Backend rejects, with the same messages.
// And the contract's building blocks, for the operations a higher layer runs on a backend
// (Backend::run_extension: objective_kernels/), so that they check and word their messages as
// the Backend's own ops do.
#include <cstdint>
#include <string>

#include "backend/backend.h"

namespace sbp {

namespace contract {

std::string num(int64_t v);
std::string num(float v);  // %g: "1e-08", "nan", "inf"
// "<op>: <arg> <dtype(shape)>"
std::string arg(const char* op, const char* name, const Tensor& t);
// Bytes of a tensor, for the profile's estimate of the memory an op moves.
int64_t nb(const Tensor& t);
// t defined with dtype dt.
void check_dtype(const char* op, const char* name, const Tensor& t, DType dt);
// Doubles carried in an F32 tensor (there is no F64 dtype): an even number of elements, at
// least 2, 8-byte aligned where the tensor has an address.
void check_double_parts(const char* op, const char* name, const Tensor& t);
// A per-row vector of a call with n rows: dtype dt, numel n.
void check_rows_vector(const char* op, const char* name, const Tensor& t, DType dt, int64_t n);
// A per-row table of a call with n rows: F32 (n, width).
void check_rows_table(const char* op, const char* name, const Tensor& t, int64_t n, int width);
// Backend::adamw_step's argument checks (host_math.h runs the same update on host memory).
void check_adamw_args(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                      const AdamWStep& s);

}  // namespace contract

void check_attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                             const Tensor& v, const Tensor& seg_start, int64_t q_offset,
                             const AttentionDims& dims);
void check_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                              const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, const Tensor& seg_start,
                              int64_t q_offset, const AttentionDims& dims);

}  // namespace sbp
