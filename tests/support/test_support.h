#pragma once
// Shared helpers for the test programs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <memory>

#include "backend/backend.h"
#include "core/pool.h"
#include "core/rng.h"
#include "core/sanitizers.h"
#include "engine/exec_config.h"

namespace sbp::test {

// Whether this program was built with AddressSanitizer (core/sanitizers.h).
inline constexpr bool kAddressSanitizer = sbp::kAddressSanitizer;

// config.json of a tiny Qwen3-shaped model whose vocabulary (512) covers the tiny-chat
// tokenizer's 457 ids: the model of the trainer's end-to-end tests.
inline const char* const kTinyChatModelJson =
    R"({"model_type": "qwen3", "hidden_size": 32, "intermediate_size": 64,
  "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
  "vocab_size": 512, "max_position_embeddings": 1024, "rope_theta": 10000.0,
  "tie_word_embeddings": true, "torch_dtype": "float32"})";

// The modes every mode-equality test compares with `base`: stream with (layer, head) chunk sizes
// 1/1, 7/5, T/3, T, 11/13 (sizes that do not divide T) and `extra_stream_chunks`, then
// checkpoint, recompute+chunked, store+chunked and stream+full with small odd chunks.
std::vector<ExecConfig> equality_modes(
    int64_t T, const std::vector<std::pair<int64_t, int64_t>>& extra_stream_chunks = {});

// The one error measure used everywhere: max |a - b| / max |b| (b is the reference).
double rel_err(const float* a, const float* b, int64_t n);
double rel_err(const Tensor& a, const Tensor& b);
// The same against a float64 reference: max |got - ref| / max |ref| (max |got - ref| when ref is
// all zeros); a NaN in got is infinitely wrong (std::max would drop it).
template <class T>
double rel_err_f64(const std::vector<T>& got, const std::vector<double>& ref) {
  double e = 0, s = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (!(d <= e)) e = std::isnan(d) ? INFINITY : d;
    s = std::max(s, std::fabs(ref[i]));
  }
  return s > 0 ? e / s : e;
}

void fill_normal(const Tensor& t, Rng& rng, float scale = 1.0f);

// The CPU backend as the tests use it: with STREAMBP_CHECK_MEMORY=1 in the environment the
// checking backend (backend/cpu/checked_cpu_backend.h), whose memory no code outside it may
// touch, so that a second run of the suite shows that nothing does. With
// STREAMBP_TEST_BACKEND=<name> (e.g. cuda) in the environment, that backend instead.
std::unique_ptr<Backend> backend();

// A tensor's bytes, downloaded from its backend (or copied from host memory).
std::vector<unsigned char> bytes_of(const Tensor& t);

// A fresh empty directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct CommandResult {
  int exit_code = 0;
  std::string output;  // stdout and stderr together
};
// Runs a shell command line and captures its output, less the line `streambp` prints when the
// BLAS runs generic kernels (OPENBLAS_CORETYPE=Prescott preset on an AVX2 or AVX-512 CPU, or a
// BLIS that does not know the CPU: src/backend/blas_core_check.h): a fact of the machine and
// its environment, which CI must leave as it finds it, not of the command under test, whose
// output the tests count line by line. Cli.GenericBlasKernelsAreNamedWithTheFix checks that line with run_command_raw.
CommandResult run_command(const std::string& cmd);
// The same, with every line the command printed.
CommandResult run_command_raw(const std::string& cmd);

// Path of the built `streambp` program and of the source tree.
std::string streambp_binary();
std::string source_dir();

std::string read_text(const std::string& path);
void write_text(const std::string& path, const std::string& text);

}  // namespace sbp::test
