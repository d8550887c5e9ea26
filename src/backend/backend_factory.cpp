#include "backend/backend_factory.h"

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"

namespace sbp {

BackendSpec parse_backend(const std::string& name) {
  // A device suffix ("cuda:1") is parsed here once a backend has devices.
  if (name == backend_name(BackendKind::cpu)) return BackendSpec{BackendKind::cpu, 0};
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
    case BackendKind::cpu:
      SBP_CHECK(spec.device == 0,
                "make_backend: the cpu backend has no device " + std::to_string(spec.device));
      return std::make_unique<CpuBackend>();
  }
  SBP_CHECK(false,
            "make_backend: unknown BackendKind " + std::to_string(static_cast<int>(spec.kind)));
  return nullptr;
}

}  // namespace sbp
