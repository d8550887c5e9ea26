#include "backend/backend_factory.h"

#include <cstdlib>

#include "backend/cpu/checked_cpu_backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/meta/meta_backend.h"
#include "core/error.h"
#if defined(STREAMBP_HAVE_CUDA)
#include "backend/cuda_factory.h"
#endif

namespace sbp {

namespace {
const char* kKnown = "(known backends: cpu, cpu-checked, cuda, cuda:N)";

void require_cuda_build(const std::string& name) {
  if (!have_cuda_backend())
    throw InputError("backend '" + name +
                     "': this build has no CUDA backend (configure with -DSTREAMBP_CUDA=ON on a "
                     "machine with nvcc)");
}
}  // namespace

bool have_cuda_backend() {
#if defined(STREAMBP_HAVE_CUDA)
  return true;
#else
  return false;
#endif
}

BackendSpec parse_backend(const std::string& name) {
  for (const BackendKind k : {BackendKind::cpu, BackendKind::cpu_checked})
    if (name == backend_name(k)) return BackendSpec{k, 0};
  if (name == "cuda") {
    require_cuda_build(name);
    return BackendSpec{BackendKind::cuda, 0};
  }
  if (name.starts_with("cuda:")) {
    const std::string digits = name.substr(5);
    // Plain decimal digits, no sign or spaces, and a number an int holds.
    const bool ok = !digits.empty() && digits.size() <= 6 &&
                    digits.find_first_not_of("0123456789") == std::string::npos;
    if (!ok)
      throw InputError("unknown backend '" + name + "': the device of cuda:N must be a number " +
                       "(cuda:0, cuda:1, ...)");
    require_cuda_build(name);
    return BackendSpec{BackendKind::cuda, std::stoi(digits)};
  }
  throw InputError("unknown backend '" + name + "' " + kKnown);
}

const char* backend_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::cpu: return "cpu";
    case BackendKind::cpu_checked: return "cpu-checked";
    case BackendKind::cuda: return "cuda";
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
    case BackendKind::cuda:
#if defined(STREAMBP_HAVE_CUDA)
      return make_cuda_backend(spec.device);
#else
      require_cuda_build("cuda:" + std::to_string(spec.device));
      return nullptr;
#endif
  }
  SBP_CHECK(false,
            "make_backend: unknown BackendKind " + std::to_string(static_cast<int>(spec.kind)));
  return nullptr;
}

std::unique_ptr<Backend> make_shape_only_backend(bool every_chunk) {
  return std::make_unique<MetaBackend>(every_chunk ? MetaBackend::Runs::all_work
                                                   : MetaBackend::Runs::ledger_only);
}

}  // namespace sbp
