#pragma once
// The one place a concrete backend is chosen and built: the trainer's `backend:` key and the
// commands' --backend flag name one, and everything else takes a Backend&.
#include <memory>
#include <string>

#include "backend/backend.h"

namespace sbp {

enum class BackendKind { cpu };

struct BackendSpec {
  BackendKind kind = BackendKind::cpu;
  int device = 0;  // for devices with an index (cuda:N), later
};

// "cpu"; anything else: InputError "unknown backend '<name>' (known backends: cpu)". The caller
// prefixes where the name came from (a config key, a flag).
BackendSpec parse_backend(const std::string& name);
const char* backend_name(BackendKind kind);
std::unique_ptr<Backend> make_backend(const BackendSpec& spec);

}  // namespace sbp
