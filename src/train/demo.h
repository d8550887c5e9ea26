#pragma once
// `streambp train` with no arguments: a small Qwen3-style model learns the long-range
// retrieval task (train/retrieval_task.h) at T = 4096 in stream mode, then saves a Hugging Face
// checkpoint and compares its memory with what gradient checkpointing would have needed.
#include <cstdint>
#include <string>

#include "engine/exec_config.h"

namespace sbp {

struct DemoOptions {
  int64_t seq_len = 4096;
  int64_t steps = 300;
  int64_t eval_every = 50;
  int64_t eval_sequences = 8;
  double lr = 3e-3;
  int64_t warmup = 20;
  double clip = 1.0;
  int64_t layer_chunk = ExecConfig{}.layer_chunk;
  int64_t head_chunk = ExecConfig{}.head_chunk;
  int64_t hidden = 64;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t num_pairs = 1;
  int64_t num_queries = 32;
  int64_t num_filler = 32;
  uint64_t seed = 0;
  int threads = 0;
  std::string out = "streambp-demo";
};

// Returns the process exit code.
int run_demo(const DemoOptions& opts);

}  // namespace sbp
