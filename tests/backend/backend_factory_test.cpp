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
  const std::string known = " (known backends: cpu, cpu-checked, cuda, cuda:N)";
  EXPECT_EQ(parse_error("gpu"), "unknown backend 'gpu'" + known);
  // Exact names only: no case folding, no whitespace, no device index on the CPU, and the
  // planner's shape-only backend is not a choice for a run.
  EXPECT_EQ(parse_error("CPU"), "unknown backend 'CPU'" + known);
  EXPECT_EQ(parse_error(" cpu"), "unknown backend ' cpu'" + known);
  EXPECT_EQ(parse_error("cpu:0"), "unknown backend 'cpu:0'" + known);
  EXPECT_EQ(parse_error("meta"), "unknown backend 'meta'" + known);
  EXPECT_EQ(parse_error(""), "unknown backend ''" + known);
  EXPECT_EQ(parse_error("CUDA"), "unknown backend 'CUDA'" + known);
  // A device index is plain decimal digits, in every build.
  for (const char* bad : {"cuda:", "cuda:x", "cuda:-1", "cuda: 1", "cuda:1.0", "cuda:99999999"})
    EXPECT_EQ(parse_error(bad), std::string("unknown backend '") + bad +
                                    "': the device of cuda:N must be a number (cuda:0, cuda:1, ...)");
}

// "cuda" and "cuda:N": a BackendKind::cuda spec in a CUDA build; in a build without it, an
// error that says so and how to get one.
TEST(BackendFactory, CudaNames) {
  if (have_cuda_backend()) {
    EXPECT_EQ(parse_backend("cuda").kind, BackendKind::cuda);
    EXPECT_EQ(parse_backend("cuda").device, 0);
    EXPECT_EQ(parse_backend("cuda:0").device, 0);
    EXPECT_EQ(parse_backend("cuda:3").device, 3);
    EXPECT_EQ(parse_backend("cuda:12").device, 12);
    EXPECT_STREQ(backend_name(BackendKind::cuda), "cuda");
  } else {
    const std::string no_cuda =
        "': this build has no CUDA backend (configure with -DSTREAMBP_CUDA=ON on a machine with "
        "nvcc)";
    EXPECT_EQ(parse_error("cuda"), "backend 'cuda" + no_cuda);
    EXPECT_EQ(parse_error("cuda:1"), "backend 'cuda:1" + no_cuda);
  }
}

// Building a cuda backend where there is no GPU (this test's usual machine) or no such device:
// one line, an InputError, with CUDA's own reason. On a GPU machine, device 0 builds.
TEST(BackendFactory, CudaWithoutDeviceIsAOneLineInputError) {
  if (!have_cuda_backend()) GTEST_SKIP() << "this build has no CUDA backend";
  try {
    const std::unique_ptr<Backend> be = make_backend(parse_backend("cuda:999"));
    ADD_FAILURE() << "cuda:999 built a backend";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_EQ(m.rfind("cuda: ", 0), 0u) << m;
  }
}

TEST(BackendFactory, CpuHasNoDeviceIndex) {
  EXPECT_THROW(make_backend(BackendSpec{BackendKind::cpu, 1}), ShapeError);
}

}  // namespace
}  // namespace sbp
