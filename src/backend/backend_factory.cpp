#include "backend/backend_factory.h"

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"

namespace sbp {

BackendSpec parse_backend(const std::string& name) {
  if (name == "cpu") return BackendSpec{BackendKind::cpu, 0};
  throw InputError("unknown backend '" + name + "' (known backends: cpu)");
}

const char* backend_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::cpu: return "cpu";
  }
  return "?";
}

std::unique_ptr<Backend> make_backend(const BackendSpec& spec) {
  switch (spec.kind) {
    case BackendKind::cpu: return std::make_unique<CpuBackend>();
  }
  throw Error("make_backend: unknown backend kind");
}

}  // namespace sbp
