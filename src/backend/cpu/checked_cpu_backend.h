#pragma once
// The checking backend of the tests: the CPU backend, with its memory out of reach
// (mprotect PROT_NONE) except while one of its own operations or transfers runs
// (MemorySpace::Access). Code outside src/backend that reads or writes a tensor's bytes
// directly, instead of through upload/download, faults at that access (SIGSEGV; under
// AddressSanitizer with a stack trace), so the tests that run on it show that the rest of the
// program treats tensor memory as a GPU's.
//
// All tensors live in one reserved range of address space (64 GiB by default, reserved
// without committing memory), so opening and closing the memory is one mprotect call each:
// the range up to the highest byte ever handed out. Freed blocks are reused first-fit.
//
// Selected by the backend name "cpu-checked", or for every "cpu" backend of a process with
// the environment variable STREAMBP_CHECK_MEMORY=1 (how the test suite runs a second time).
#include <cstddef>
#include <map>

#include "backend/cpu/cpu_backend.h"

namespace sbp {

class CheckedCpuBackend final : public CpuBackend {
 public:
  explicit CheckedCpuBackend(size_t reserve_bytes = size_t{64} << 30);
  ~CheckedCpuBackend() override;
  CheckedCpuBackend(const CheckedCpuBackend&) = delete;
  CheckedCpuBackend& operator=(const CheckedCpuBackend&) = delete;

  std::string name() const override { return "cpu-checked"; }
  void* allocate_bytes(size_t bytes) override;
  void release_bytes(void* p, size_t bytes) override;
  bool host_addressable() const override { return false; }

 protected:
  void open_memory() override;
  void close_memory() override;

 private:
  void protect(int prot);
  char* base_ = nullptr;
  size_t reserved_ = 0;
  size_t top_ = 0;                 // bytes of the range ever handed out (page multiple)
  std::map<size_t, size_t> free_;  // offset -> size of free blocks below top_, coalesced
  std::map<size_t, size_t> used_;  // offset -> size of live blocks
};

}  // namespace sbp
