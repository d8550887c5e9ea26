#pragma once
// Helpers for the data-parallel tests: runs of `streambp train` on one process and under
// `mpirun -np N` on tiny models, and comparisons of their checkpoints.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "dist/world.h"
#include "model/safetensors.h"
#include "support/test_support.h"

namespace sbp::dist_test {

// Under AddressSanitizer (scripts/test.sh's second run): OpenMPI and PMIx keep allocations past
// MPI_Finalize. Their plugins stay loaded (no dlclose) and stacks are unwound fully, so that
// lsan_openmpi.supp can name the libraries those allocations come from; leaks elsewhere are
// still reported.
inline std::string sanitizer_env() {
  if (!test::kAddressSanitizer) return "";
  return "ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0\" "
         "LSAN_OPTIONS=suppressions=" +
         test::source_dir() +
         "/tests/dist/lsan_openmpi.supp OMPI_MCA_mca_base_component_disable_dlclose=1 "
         "PMIX_MCA_mca_base_component_disable_dlclose=1 ";
}

// OpenMPI as root in a container, offline, on a shared 2-core machine: shared memory between
// ranks only (no network), no core binding, no single-copy (CMA needs ptrace rights that
// containers often lack). `session_dir`: OpenMPI's session files go there rather than into
// /tmp/ompi.<host>.<uid>, which two mpiruns started at the same moment (ctest -j) race to create.
inline std::string mpirun(int ranks, const std::string& session_dir) {
  return sanitizer_env() +
         "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=passive mpirun "
         "-np " +
         std::to_string(ranks) +
         " --oversubscribe --bind-to none --mca btl self,vader --mca "
         "btl_vader_single_copy_mechanism none"
         " --mca orte_tmpdir_base " +
         session_dir + " ";
}

inline bool have_mpirun() {
  return built_with_mpi() && test::run_command("command -v mpirun").exit_code == 0;
}

#define SKIP_WITHOUT_MPIRUN()                                                               \
  do {                                                                                      \
    if (!::sbp::dist_test::have_mpirun()) GTEST_SKIP() << "built without MPI or no mpirun"; \
  } while (0)

inline const char* const kTinyModel = test::kTinyChatModelJson;

// A run directory: a model config and a config.yaml training it; `yaml` is appended.
struct TrainDir {
  test::TempDir dir;
  std::string config;
  explicit TrainDir(const std::string& yaml, const std::string& model_json = kTinyModel) {
    test::write_text(dir.file("model.json"), model_json);
    config = dir.file("config.yaml");
    test::write_text(config, "model: " + dir.file("model.json") +
                                 "\ntokenizer: " + test::source_dir() +
                                 "/examples/tiny-chat\nthreads: 1\nsave_dtype: f32\n" + yaml);
  }
  std::string out(const std::string& name) const { return dir.file(name); }
  // `streambp train` into output_dir=<name>, on one process (ranks 0) or under mpirun.
  test::CommandResult train(int ranks, const std::string& name,
                            const std::string& args = "") const {
    const std::string cmd = (ranks > 0 ? mpirun(ranks, dir.path()) : std::string()) +
                            test::streambp_binary() + " train " + config +
                            " output_dir=" + out(name) + " " + args;
    return test::run_command(cmd);
  }
};

inline std::map<std::string, std::vector<float>> read_tensors(const std::string& path) {
  SafetensorsFile f(path);
  std::map<std::string, std::vector<float>> out;
  for (const SafetensorsEntry& e : f.entries()) {
    std::vector<float>& v = out[e.name];
    v.resize(static_cast<size_t>(e.shape.numel()));
    f.read_into(e.name, Tensor(v.data(), DType::F32, {e.shape.numel()}));
  }
  return out;
}

// max over tensors of max |a - b| / max |b| (test_support's measure, b the reference).
inline double worst_rel_err(const std::string& a_path, const std::string& b_path) {
  const auto a = read_tensors(a_path), b = read_tensors(b_path);
  EXPECT_EQ(a.size(), b.size()) << a_path << " vs " << b_path;
  double worst = 0.0;
  for (const auto& [name, want] : b) {
    auto it = a.find(name);
    EXPECT_NE(it, a.end()) << name << " missing in " << a_path;
    if (it == a.end() || it->second.size() != want.size()) return INFINITY;
    worst = std::max(
        worst, test::rel_err(it->second.data(), want.data(), static_cast<int64_t>(want.size())));
  }
  return worst;
}

// The trained weights of two fp32 runs that sum the same gradients in different orders (ranks
// against one process): the bound that follows from the exactness contract (docs/HACKING.md,
// "The exactness contract"). They are not bit-equal: ranks add their partial gradients (and,
// with context parallelism, dK/dV) in another order than one process adds its micro-batches,
// and their products have other row counts, which a BLAS kernel may round differently.
//
// Per tensor, max |a - b| <= sum over the steps k of
//   ulp(max |w|)                                  the two updates may round to adjacent floats
//   + lr_k * (2.03 / eps) * 2 * eps_g * |g_k|     the update's own difference
// with |g_k| the step's gradient norm before clipping (the reference's metrics), and:
//   eps_g = 1e-5 (fp32) the contract's relative agreement of two summation orders of a gradient
//     (DESIGN.md section 7; the mode-equality suites assert it for every objective and mode);
//     bf16 runs round activations to 8 bits, so two orders agree to the bf16 unit, 2^-8;
//   2: clipping to a norm c, g c / |g|, moves an element by at most |dg|_inf + |dg|_2;
//   2.03 / eps: AdamW's update m^ / (sqrt(v^) + eps) moves by at most
//     (|dm^| + (|m^| / sqrt(v^)) |d sqrt(v^)|) / eps, where |dm^| and |d sqrt(v^)| are at most
//     max |dg| (weighted means), and |m^| / sqrt(v^) <= 1.03 over the first 8 steps with
//     betas (0.9, 0.999) (Cauchy-Schwarz on the two bias-corrected weightings).
// A weight's effect on later gradients is second order (the differences measured are one ulp
// at eps 1e-3) and is not counted. The runs must use an eps that keeps the bound useful: at
// lr 1e-4, eps 1e-3 bounds an fp32 step by ~6e-6 |g|, where a micro-batch trained on the wrong
// rank moves weights by ~3e-4 (measured on the SFT case; eps 1e-6 would give a useless bound of
// 2e-3 |g| a step, since Adam then turns summation noise in tiny gradient elements into update
// noise of ~lr).
struct TrainedRun {
  std::vector<nlohmann::json> metrics;  // the reference's metrics.jsonl
  std::string norm_key = "grad_norm";   // "value_grad_norm" for PPO's value model
  double eps = 1e-3;                    // optim.eps of both runs
  bool bf16 = false;                    // precision: bf16
};

inline double trained_weights_bound(const TrainedRun& run, double max_w) {
  EXPECT_LE(run.metrics.size(), 8u) << "the bound's AdamW constant holds for 8 steps";
  const double eps_g = run.bf16 ? 1.0 / 256.0 : 1e-5;
  const float w = static_cast<float>(max_w);
  const double ulp = static_cast<double>(std::nextafter(w, INFINITY) - w);
  double bound = 0.0;
  for (const nlohmann::json& m : run.metrics)
    bound += ulp + m["lr"].get<double>() * (2.03 / run.eps) * 2.0 * eps_g *
                       m[run.norm_key].get<double>();
  return bound;
}

// The same for AdamW's moments ("m.<name>", "v.<name>" in optimizer files), betas (0.9, 0.999),
// clipping at 1: the first moment is a weighted sum of the clipped gradients, so it moves by at
// most sum_k 0.1 |dg_k|_inf; the second of their squares, by sum_k 0.001 (2 c_k + |dg_k|) |dg_k|
// with c_k = min(|g_k|, 1) bounding an element of the clipped gradient; each step may round once
// more.
inline double trained_moment_bound(const TrainedRun& run, bool second, double max_m) {
  const double eps_g = run.bf16 ? 1.0 / 256.0 : 1e-5;
  const float m0 = static_cast<float>(max_m);
  const double ulp = static_cast<double>(std::nextafter(m0, INFINITY) - m0);
  double bound = 0.0;
  for (const nlohmann::json& m : run.metrics) {
    const double g = m[run.norm_key].get<double>(), dg = 2.0 * eps_g * g;
    bound += ulp + (second ? 0.001 * (2.0 * std::min(g, 1.0) + dg) * dg : 0.1 * dg);
  }
  return bound;
}

// The largest max |a - b| / bound over the tensors of the safetensors files `a_path` and
// `b_path` (the reference; trained_moment_bound for an optimizer file's moments,
// trained_weights_bound otherwise); infinite if their tensors differ in names or sizes.
inline double trained_weights_ratio(const std::string& a_path, const std::string& b_path,
                                    const TrainedRun& run, std::string* worst_name = nullptr) {
  const auto a = read_tensors(a_path), b = read_tensors(b_path);
  if (a.size() != b.size()) return INFINITY;
  double worst = 0.0;
  for (const auto& [name, want] : b) {
    auto it = a.find(name);
    if (it == a.end() || it->second.size() != want.size()) return INFINITY;
    double diff = 0.0, max_w = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
      diff = std::max(diff, std::fabs(static_cast<double>(it->second[i]) - want[i]));
      max_w = std::max(max_w, std::fabs(static_cast<double>(want[i])));
    }
    const bool moment = name.rfind("m.", 0) == 0 || name.rfind("v.", 0) == 0;
    const double bound = moment ? trained_moment_bound(run, name[0] == 'v', max_w)
                                : trained_weights_bound(run, max_w);
    const double ratio = diff / bound;
    if (ratio >= worst && worst_name) *worst_name = name;
    worst = std::max(worst, ratio);
  }
  return worst;
}

// Every tensor of `a_path` within trained_weights_bound of `b_path`'s; returns the ratio.
inline double expect_trained_weights_close(const std::string& a_path, const std::string& b_path,
                                           const TrainedRun& run, const std::string& label) {
  std::string name;
  const double worst = trained_weights_ratio(a_path, b_path, run, &name);
  EXPECT_LE(worst, 1.0) << label << ": " << name << " of " << a_path << " against " << b_path;
  return worst;
}

inline bool same_bytes(const std::string& a, const std::string& b) {
  return std::filesystem::exists(a) && test::read_text(a) == test::read_text(b);
}

inline std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream in(test::read_text(path));
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Every float metric of `got_path`'s metrics.jsonl against `want_path`'s, within 1e-6 relative
// (absolute below 1), times aside; the step's counts exactly; `ranks` the run's world size.
inline void expect_same_metrics(const std::string& got_path, const std::string& want_path,
                                const std::string& name, int ranks) {
  const std::vector<nlohmann::json> got = read_metrics(got_path);
  const std::vector<nlohmann::json> want = read_metrics(want_path);
  ASSERT_EQ(got.size(), want.size()) << name;
  for (size_t i = 0; i < got.size(); ++i) {
    for (const char* key : {"micro_batches", "tokens", "loss_tokens"})
      EXPECT_EQ(got[i][key], want[i][key]) << name << " step " << i + 1 << ": " << key;
    for (const auto& [key, value] : want[i].items()) {
      if (!value.is_number_float() || key.find("time") != std::string::npos ||
          key.find("per_s") != std::string::npos || key.find("seconds") != std::string::npos ||
          key == "elapsed_s")
        continue;
      ASSERT_TRUE(got[i].contains(key)) << name << " step " << i + 1 << ": " << key;
      const double a = got[i][key].get<double>(), b = value.get<double>();
      EXPECT_LE(std::fabs(a - b), 1e-6 * std::max(1.0, std::fabs(b)))
          << name << " step " << i + 1 << ": " << key;
    }
    EXPECT_EQ(got[i]["dist/ranks"], ranks) << name;
  }
}

// The adapters LoRA runs start from (lora.adapter): PEFT's initialisation has B = 0, so that
// B's whole value after a few steps would be Adam's movement (~lr), and max |a - b| / max |b|
// would measure rounding against lr instead of against the adapters (on DPO, 3.3e-5 for a
// down_proj.lora_B whose largest element was 2.5e-4, an 8e-9 difference). Two SFT steps at lr
// 0.05 move every B to ~0.075, so the measure is the one the full-weight tests apply.
// `lora_yaml`: the run's lora: block.
struct StartAdapter {
  TrainDir dir;
  std::string path;
  explicit StartAdapter(const std::string& lora_yaml)
      : dir("objective: sft\ndata:\n  train: " + test::source_dir() +
            "/examples/data/sft_messages.jsonl\nmax_tokens: 160\n" + lora_yaml +
            "max_steps: 2\noptim:\n  lr: 0.05\n"),
        path(dir.out("start/checkpoint-2")) {
    const auto r = dir.train(0, "start");
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
  std::string arg() const { return " lora.adapter=" + path; }
};

}  // namespace sbp::dist_test
