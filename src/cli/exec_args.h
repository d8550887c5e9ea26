#pragma once
// The execution flags of the commands that run (or plan) a step, declared here once: how the
// step is cut (--mode or --modes, --layer-chunk, --head-chunk), its precision (--precision,
// --grad-dtype) and where it runs (--backend, --threads). A command sets its defaults in the
// fields, says which flags it takes (ExecFlags), and reads the step's ExecConfig back from
// configs(); a new execution flag is one field, one add_option in add_flags and one line in
// configs(), for every command at once.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "backend/backend.h"
#include "core/dtype.h"
#include "engine/exec_config.h"

namespace sbp::cli {

// The chunk sizes a command uses when --layer-chunk / --head-chunk are not given.
enum class ChunkDefault {
  exec_config,  // ExecConfig's (layer 1024, head 512): score, generate
  quarter,      // layer ceil(T/4), head 512: bench, a few chunks at every T
  uneven,       // layer T/4 + 1, head T/3 + 1: gradcheck, chunks that split T with a short last
  planned,      // `auto`: the largest that fits the budget, chosen by the planner (plan)
};

// Which of the group's flags a command takes.
struct ExecFlags {
  bool mode_list = false;  // --modes, a comma-separated list (else --mode, one)
  const char* mode_help = "base, checkpoint, stream or <store|recompute|stream>+<full|chunked>";
  bool head_chunk = true;  // generate's prompt has no LM-head blocks
  ChunkDefault chunks = ChunkDefault::exec_config;
  bool precision_list = false;  // bench: precisions compared, interleaved with the modes
  bool grad_dtype = false;      // plan: the gradient buffers' dtype
  bool runs = true;             // --threads and --backend (plan computes nothing)
  bool offload = true;          // --offload (generate: no step to offload from)
  bool offload_list = false;    // bench: offload settings compared, interleaved with the modes
  // --offload's `optimizer` item: only where an optimizer runs (bench and plan with
  // --optimizer adamw); gradcheck and score refuse it rather than ignore it.
  bool offload_optimizer = false;
};

struct ExecArgs {
  // The flags' values; a command changes a default before add_flags.
  std::string modes = "stream";  // --mode or --modes
  std::string layer_chunk;       // "" (not given): ChunkDefault; `auto` where planned
  std::string head_chunk;
  std::string precision = "fp32";  // one, or a comma-separated list with precision_list
  std::string grad_dtype = "f32";  // f32 | bf16 (core/dtype.h kGradDtypeNames)
  int threads = 0;                 // 0: all
  std::string backend = "cpu";     // cpu, cuda or cuda:N
  std::string offload = "none";    // none | checkpoints (ExecConfig::offload); a list in bench
  bool offload_list = false;       // set by add_flags: --offload is bench's list of settings
  bool offload_optimizer = false;  // set by add_flags: the `optimizer` item is accepted

  void add_flags(CLI::App* c, const ExecFlags& takes);

  // --mode / --modes with the other flags applied: the chunk sizes (given, or `chunks` at T
  // tokens; with ChunkDefault::planned the planner's ChunkRequest carries them, see
  // chunk_request) and the activations' dtype of `p`. InputError naming the flag.
  std::vector<ExecConfig> configs(ChunkDefault chunks, int64_t T, Precision p) const;
  ExecConfig config(ChunkDefault chunks, int64_t T, Precision p) const;  // --mode's one
  // --layer-chunk / --head-chunk as numbers, 0 for not given or `auto`.
  int64_t layer_chunk_rows() const;
  int64_t head_chunk_rows() const;
  Precision precision_value() const;                // --precision, one
  std::vector<Precision> precision_values() const;  // --precision, a list
  DType grad_dtype_value() const;
  Offload offload_value() const;                // --offload, one
  std::vector<Offload> offload_values() const;  // --offload, a comma-separated list (bench)
  // Sets the CPU threads (--threads) and makes the backend (--backend).
  void set_threads() const;
  std::unique_ptr<Backend> make_backend() const;

 private:
  void apply(ExecConfig& e, ChunkDefault chunks, int64_t T, Precision p) const;
};

}  // namespace sbp::cli
