// parse_backend / make_backend: the names a config key or flag may give, and the one-line error
// for any other (the caller prefixes the key or flag, so the message names none).
#include "backend/backend_factory.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include <string>

namespace sbp {
namespace {

std::string parse_error(const std::string& name) {
  try {
    parse_backend(name);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(BackendFactory, ParsesCpu) {
  const BackendSpec spec = parse_backend("cpu");
  EXPECT_EQ(spec.kind, BackendKind::cpu);
  EXPECT_EQ(spec.device, 0);
  EXPECT_STREQ(backend_name(spec.kind), "cpu");
  // The suite may run with STREAMBP_CHECK_MEMORY=1, which turns "cpu" into the checking backend:
  // both ways, then the environment as it was.
  const char* env = std::getenv("STREAMBP_CHECK_MEMORY");
  const std::string saved = env ? env : "";
  unsetenv("STREAMBP_CHECK_MEMORY");
  const std::unique_ptr<Backend> be = make_backend(spec);
  ASSERT_NE(be, nullptr);
  EXPECT_EQ(be->name(), "cpu");
  EXPECT_TRUE(be->computes());
  EXPECT_TRUE(be->host_addressable());
  setenv("STREAMBP_CHECK_MEMORY", "1", 1);
  EXPECT_EQ(make_backend(spec)->name(), "cpu-checked");
  EXPECT_FALSE(make_backend(spec)->host_addressable());
  if (env)
    setenv("STREAMBP_CHECK_MEMORY", saved.c_str(), 1);
  else
    unsetenv("STREAMBP_CHECK_MEMORY");
  EXPECT_EQ(make_backend(parse_backend("cpu-checked"))->name(), "cpu-checked");
}

TEST(BackendFactory, UnknownNamesAreInputErrorsListingTheKnownOnes) {
  EXPECT_EQ(parse_error("gpu"), "unknown backend 'gpu' (known backends: cpu, cpu-checked)");
  // Not yet: a CUDA build adds these.
  EXPECT_EQ(parse_error("cuda"), "unknown backend 'cuda' (known backends: cpu, cpu-checked)");
  EXPECT_EQ(parse_error("cuda:1"), "unknown backend 'cuda:1' (known backends: cpu, cpu-checked)");
  // Exact names only: no case folding, no whitespace, no device index on the CPU, and the
  // planner's shape-only backend is not a choice for a run.
  EXPECT_EQ(parse_error("CPU"), "unknown backend 'CPU' (known backends: cpu, cpu-checked)");
  EXPECT_EQ(parse_error(" cpu"), "unknown backend ' cpu' (known backends: cpu, cpu-checked)");
  EXPECT_EQ(parse_error("cpu:0"), "unknown backend 'cpu:0' (known backends: cpu, cpu-checked)");
  EXPECT_EQ(parse_error("meta"), "unknown backend 'meta' (known backends: cpu, cpu-checked)");
  EXPECT_EQ(parse_error(""), "unknown backend '' (known backends: cpu, cpu-checked)");
}

TEST(BackendFactory, CpuHasNoDeviceIndex) {
  EXPECT_THROW(make_backend(BackendSpec{BackendKind::cpu, 1}), ShapeError);
}

}  // namespace
}  // namespace sbp
