#include "backend/backend_factory.h"

#include <cstdlib>

#include "backend/cpu/checked_cpu_backend.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"

namespace sbp {

BackendSpec parse_backend(const std::string& name) {
  // A device suffix ("cuda:1") is parsed here once a backend has devices.
  for (const BackendKind k : {BackendKind::cpu, BackendKind::cpu_checked})
    if (name == backend_name(k)) return BackendSpec{k, 0};
  throw InputError("unknown backend '" + name + "' (known backends: cpu, cpu-checked)");
}

const char* backend_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::cpu: return "cpu";
    case BackendKind::cpu_checked: return "cpu-checked";
  }
  return "?";
}

std::unique_ptr<Backend> make_backend(const BackendSpec& spec) {
  switch (spec.kind) {
    case BackendKind::cpu:
    case BackendKind::cpu_checked: {
      SBP_CHECK(spec.device == 0,
                "make_backend: the cpu backend has no device " + std::to_string(spec.device));
      const char* env = std::getenv("STREAMBP_CHECK_MEMORY");
      const bool checked =
          spec.kind == BackendKind::cpu_checked || (env && std::string(env) == "1");
      if (checked) return std::make_unique<CheckedCpuBackend>();
      return std::make_unique<CpuBackend>();
    }
  }
  SBP_CHECK(false,
            "make_backend: unknown BackendKind " + std::to_string(static_cast<int>(spec.kind)));
  return nullptr;
}

}  // namespace sbp
