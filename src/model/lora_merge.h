#pragma once
// Folding adapters into the base weights: W <- W + s B A for every adapted projection, the
// model PEFT's merge_and_unload() gives. `streambp merge` writes it as a Hugging Face checkpoint;
// the tests use it as an independent reference for the adapters' gradients (with W' = W + s B A,
// dL/dB = s dL/dW' A^T and dL/dA = s B^T dL/dW').
#include "backend/backend.h"
#include "model/lora.h"
#include "model/parameters.h"

namespace sbp {

// The base weight an adapter of (layer, target) sits on.
const Tensor& lora_base_weight(const ModelTensors& w, int64_t layer, LoraTarget t);

// weights += the adapters, in place (same backend). sign = -1 takes them out again.
void merge_lora(const ParameterSet& weights, const LoraSet& lora, Backend& be, float sign = 1.0f);

// After merge_lora, before anything is written: every merged W + s B A must be finite and fit
// `out` (f16 tops out at 65504, bf16 near 3.4e38). Finite factors can still overflow (a large
// alpha, large B and A): InputError naming the tensor and the element, else a file of inf/NaN.
void check_merged_weights(const ParameterSet& weights, const LoraSet& lora, DType out);

}  // namespace sbp
