#pragma once
// Which backend a run uses, by name: a config key or command-line flag that chooses the backend
// parses its value with parse_backend and builds the backend with make_backend.
//
// Names: "cpu", "cpu-checked", and "cuda" / "cuda:N" (BackendKind::cuda with device N; "cuda"
// is device 0). A build without the CUDA backend (STREAMBP_CUDA=OFF, or no nvcc where it was
// configured) rejects the cuda names with a message saying so. The shape-only backend
// (backend/meta/) is not a choice for a run: the planner builds it with make_shape_only_backend.
#include <memory>
#include <string>

#include "backend/backend.h"

namespace sbp {

// cpu_checked: the CPU backend with its memory out of reach outside its own operations
// (backend/cpu/checked_cpu_backend.h), for tests.
enum class BackendKind { cpu, cpu_checked, cuda };

struct BackendSpec {
  BackendKind kind = BackendKind::cpu;
  int device = 0;  // device index of a GPU backend ("cuda:N"); 0 for the CPU
};

// True when this build has the CUDA backend (configured with STREAMBP_CUDA=ON).
bool have_cuda_backend();

// "cpu", "cpu-checked", "cuda" or "cuda:N". Throws InputError("unknown backend '<name>' (known
// backends: cpu, cpu-checked, cuda, cuda:N)"), or, for a cuda name in a build without CUDA,
// InputError("backend '<name>': this build has no CUDA backend (...)"); the caller prefixes the
// config key or flag the name came from.
BackendSpec parse_backend(const std::string& name);

// "cpu", "cpu-checked", "cuda"
const char* backend_name(BackendKind kind);

// With the environment variable STREAMBP_CHECK_MEMORY=1, a "cpu" spec builds the checking
// backend: how the test suite runs its engine, trainer and command tests a second time.
// A cuda spec on a machine without a usable GPU or driver throws a one-line InputError with
// CUDA's error string.
std::unique_ptr<Backend> make_backend(const BackendSpec& spec);

// The shape-only backend `plan` runs a step on: tensors without memory, kernels that count FLOPs
// (backend/meta/meta_backend.h), built here so that no layer above the backend names it.
// every_chunk false: the engine's chunk loops run only the chunks whose allocations differ
// (MetaBackend::Runs::ledger_only: the ledger is exact, the FLOP count is not); true: all of them.
std::unique_ptr<Backend> make_shape_only_backend(bool every_chunk);

}  // namespace sbp
