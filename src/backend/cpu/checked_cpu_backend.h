#pragma once
// The checking backend of the tests: the CPU backend, with its memory out of reach
// (mprotect PROT_NONE) except while one of its own operations or transfers runs
// (MemorySpace::Access). Code outside src/backend that reads or writes a tensor's bytes
// directly, instead of through upload/download, faults at that access (SIGSEGV; under
// AddressSanitizer with a stack trace), so the tests that run on it show that the rest of the
// program treats tensor memory as a GPU's.
//
// Its host space (offloaded tensors, Backend::host_memory) is out of reach in the same way
// except while a copy runs, and its copies are asynchronous as a GPU's are, to the extreme: a
// queued copy runs only when wait_copy() is called for it. So code that reads an offloaded
// tensor on the host faults, and code that uses a tensor before its copy was waited for is
// refused by the in-flight check and, were that check gone, would read stale bytes.
//
// All tensors live in reserved ranges of address space (64 GiB each by default, reserved
// without committing memory: protected_arena.h). Freed blocks are reused first-fit.
//
// Selected by the backend name "cpu-checked", or for every "cpu" backend of a process with
// the environment variable STREAMBP_CHECK_MEMORY=1 (how the test suite runs a second time).
#include <cstddef>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/protected_arena.h"
#include "backend/host_space.h"

namespace sbp {

class CheckedCpuBackend final : public CpuBackend {
 public:
  explicit CheckedCpuBackend(size_t reserve_bytes = size_t{64} << 30);
  CheckedCpuBackend(const CheckedCpuBackend&) = delete;
  CheckedCpuBackend& operator=(const CheckedCpuBackend&) = delete;

  std::string name() const override { return "cpu-checked"; }
  void* allocate_bytes(size_t bytes) override { return arena_.allocate(bytes); }
  void release_bytes(void* p, size_t) override { arena_.release(p); }
  bool host_addressable() const override { return false; }

 protected:
  void open_memory() override { arena_.open(); }
  void close_memory() override { arena_.close(); }
  MemorySpace& host_memory_impl() override { return host_; }
  void copy_async_impl(void* dst, const void* src, size_t bytes, bool to_host,
                       CopyTicket ticket) override;
  void wait_copy_impl(CopyTicket ticket) override;

 private:
  // The host space: plain host memory as the CPU backend's, in a protected arena of its own.
  class CheckedHostSpace final : public PlainHostSpace {
   public:
    CheckedHostSpace(const MemorySpace& backend, size_t reserve_bytes)
        : PlainHostSpace(backend), arena_(reserve_bytes) {}
    void* allocate_bytes(size_t bytes) override { return arena_.allocate(bytes); }
    void release_bytes(void* p, size_t) override { arena_.release(p); }
    bool host_addressable() const override { return false; }

   protected:
    void open_memory() override { arena_.open(); }
    void close_memory() override { arena_.close(); }

   private:
    ProtectedArena arena_;
  };
  struct Pending {
    void* dst;
    const void* src;
    size_t bytes;
    CopyTicket ticket;
  };

  ProtectedArena arena_;
  CheckedHostSpace host_;
  std::vector<Pending> pending_;  // queued copies, in order; run at wait_copy_impl
};

}  // namespace sbp
