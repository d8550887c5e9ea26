#include "cli/exec_args.h"

#include <algorithm>
#include <sstream>

#include "backend/cpu_threads.h"
#include "cli/flag_checks.h"
#include "cli/model_source.h"
#include "core/error.h"
#include "plan/size_arg.h"

namespace sbp::cli {

namespace {

// ChunkDefault's sizes at T tokens: {layer, head}.
std::pair<int64_t, int64_t> default_chunks(ChunkDefault d, int64_t T) {
  const ExecConfig e;
  switch (d) {
    case ChunkDefault::exec_config: return {e.layer_chunk, e.head_chunk};
    case ChunkDefault::quarter: return {std::max<int64_t>(1, (T + 3) / 4), e.head_chunk};
    // The trainer's defaults (1024, 512) exceed a short check's T, and a single chunk checks
    // nothing of the streaming: chunks that split T, uneven last chunks included.
    case ChunkDefault::uneven: return {T / 4 + 1, T / 3 + 1};
    case ChunkDefault::planned: return {e.layer_chunk, e.head_chunk};  // ChunkRequest's business
  }
  return {e.layer_chunk, e.head_chunk};
}

int64_t chunk_rows(const std::string& text, const char* flag) {
  if (text.empty()) return 0;
  return parse_chunk_flag(text, flag);
}

}  // namespace

void ExecArgs::add_flags(CLI::App* c, const ExecFlags& takes) {
  if (takes.mode_list)
    c->add_option("--modes", modes, "Comma-separated modes: " + std::string(takes.mode_help))
        ->capture_default_str();
  else
    c->add_option("--mode", modes, takes.mode_help)->capture_default_str();
  if (takes.chunks == ChunkDefault::planned) {
    // `auto` or a number: parsed (parse_chunk_flag) when the command runs.
    layer_chunk = head_chunk = "auto";
    c->add_option("--layer-chunk", layer_chunk,
                  "Stream-mode rows per chunk, or auto: the largest that fits the budget")
        ->capture_default_str();
    if (takes.head_chunk)
      c->add_option("--head-chunk", head_chunk,
                    "LM-head rows per block (chunked head), or auto: the largest that fits")
          ->capture_default_str();
  } else {
    const ExecConfig e;
    const std::string layer_default =
        takes.chunks == ChunkDefault::quarter  ? " (default: T/4)"
        : takes.chunks == ChunkDefault::uneven ? " (default: T/4 + 1)"
                                               : " (default: " + std::to_string(e.layer_chunk) + ")";
    const std::string head_default = takes.chunks == ChunkDefault::uneven
                                         ? " (default: T/3 + 1)"
                                         : " (default: " + std::to_string(e.head_chunk) + ")";
    c->add_option("--layer-chunk", layer_chunk,
                  std::string("Stream-mode chunk length in tokens") + layer_default)
        ->check(int_in(1, kMaxFlagInt));
    if (takes.head_chunk)
      c->add_option("--head-chunk", head_chunk,
                    std::string("LM-head chunk length in tokens") + head_default)
          ->check(int_in(1, kMaxFlagInt));
  }
  if (takes.precision_list)
    c->add_option("--precision", precision,
                  "Comma-separated precisions, interleaved with the modes: fp32, bf16")
        ->capture_default_str();
  else if (takes.grad_dtype)  // plan: --dtype is the flag's older name
    c->add_option("--precision,--dtype", precision,
                  "bf16 (weights, activations, checkpoints, head blocks in bf16) or fp32")
        ->capture_default_str();
  else
    c->add_option("--precision", precision,
                  "fp32, or bf16: weights, activations, checkpoints and head blocks in bf16")
        ->capture_default_str();
  if (takes.grad_dtype)
    c->add_option("--grad-dtype", grad_dtype,
                  "Gradient buffers: f32 (the trainer's default) or bf16 (the paper's setup)")
        ->capture_default_str();
  offload_list = takes.offload_list;
  offload_optimizer = takes.offload_optimizer;
  if (takes.offload_list)
    c->add_option("--offload", offload,
                  "Comma-separated offload settings, interleaved with the modes: none, "
                  "checkpoints (layer inputs wait in host memory), residual_grad, optimizer "
                  "(with --optimizer adamw), or several joined by + (checkpoints+optimizer)")
        ->capture_default_str();
  else if (takes.offload)
    c->add_option("--offload", offload,
                  "none, checkpoints (every layer input but the last waits in host memory, "
                  "prefetched one layer ahead of its backward), residual_grad (the residual "
                  "stream's gradient waits there, a chunk at a time on the device), optimizer "
                  "(AdamW's moments, fp32 master weights and the gradient sums live there, each "
                  "layer's gradient leaves the device as its backward completes, the update runs "
                  "on the CPU), or several joined by + (checkpoints+residual_grad+optimizer)")
        ->capture_default_str();
  if (takes.runs) {
    c->add_option("--threads", threads, "Threads (default: all)")->check(int_in(0, 4096));
    c->add_option("--backend", backend, "Backend that computes: cpu, cuda or cuda:N (CUDA builds)")
        ->capture_default_str();
  }
}

void ExecArgs::apply(ExecConfig& e, ChunkDefault chunks, int64_t T, Precision p) const {
  const auto [layer, head] = default_chunks(chunks, T);
  const int64_t layer_given = layer_chunk_rows(), head_given = head_chunk_rows();
  e.layer_chunk = layer_given > 0 ? layer_given : layer;
  e.head_chunk = head_given > 0 ? head_given : head;
  e.act_dtype = storage_dtype(p);
  // One setting, in which ',' joins items like '+' (checkpoints,residual_grad); bench's list is
  // split into settings per run instead (offload_values), and sets them there.
  if (!offload_list) e.offload = offload_value();
}

namespace {
// The `optimizer` item where no optimizer runs: an error, not a setting that means nothing.
Offload checked(const Offload& o, bool optimizer_runs) {
  if (o.optimizer && !optimizer_runs)
    throw InputError("--offload: 'optimizer': this command runs no optimizer (the item applies "
                     "to train, and to bench and plan with --optimizer adamw)");
  return o;
}
}  // namespace

Offload ExecArgs::offload_value() const {
  return checked(parse_offload(offload), offload_optimizer);
}

std::vector<Offload> ExecArgs::offload_values() const {
  std::vector<Offload> out;
  std::stringstream ss(offload);
  std::string item;
  while (std::getline(ss, item, ','))
    out.push_back(checked(parse_offload(item), offload_optimizer));
  if (out.empty())
    throw InputError("--offload: empty list (use none, or checkpoints, residual_grad and optimizer "
                     "joined by +)");
  return out;
}

std::vector<ExecConfig> ExecArgs::configs(ChunkDefault chunks, int64_t T, Precision p) const {
  std::vector<ExecConfig> out = parse_modes(modes);
  for (ExecConfig& e : out) apply(e, chunks, T, p);
  return out;
}

ExecConfig ExecArgs::config(ChunkDefault chunks, int64_t T, Precision p) const {
  ExecConfig e = parse_mode(modes);
  apply(e, chunks, T, p);
  return e;
}

int64_t ExecArgs::layer_chunk_rows() const { return chunk_rows(layer_chunk, "--layer-chunk"); }
int64_t ExecArgs::head_chunk_rows() const { return chunk_rows(head_chunk, "--head-chunk"); }

Precision ExecArgs::precision_value() const { return precision_from_flag(precision); }

std::vector<Precision> ExecArgs::precision_values() const {
  return precisions_from_flag(precision);
}

DType ExecArgs::grad_dtype_value() const {
  DType d{};
  if (!try_parse_enum<DType>(kGradDTypeNames, grad_dtype, &d))
    throw InputError("--grad-dtype: unknown dtype '" + grad_dtype + "' (use " +
                     enum_choices<DType>(kGradDTypeNames) + ")");
  return d;
}

void ExecArgs::set_threads() const { set_cpu_threads(threads); }

std::unique_ptr<Backend> ExecArgs::make_backend() const { return backend_from_flag(backend); }

}  // namespace sbp::cli
