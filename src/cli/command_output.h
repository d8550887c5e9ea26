#pragma once
// What a command hands to a program that embeds it (the Python package, python/src/) instead of
// printing it or writing files: the same computation as on the command line, the results in
// memory. A command registered with a CommandOutput prints nothing of its results.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sbp::cli {

struct OutputArray {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;  // row-major, the tensor's fp32 values
};

struct CommandOutput {
  // In: score's {"sequences": ..., "loss_mask": ...} (what --input's file holds); `grads`: also
  // every parameter's gradient (what --grads writes).
  nlohmann::json input;
  // In: generate's prompt records as the JSONL lines --input's file holds (data/data_source.h),
  // read when --input is not given.
  std::shared_ptr<const std::string> input_lines;
  bool grads = false;
  // Out: what --json writes (plan, score), or generate's lines as an array.
  nlohmann::json json;
  std::vector<OutputArray> arrays;  // score: log-probs per sequence ("logprobs/<i>"), gradients
};

}  // namespace sbp::cli
