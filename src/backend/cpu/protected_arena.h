#pragma once
// One reserved range of address space (reserved without committing memory) handing out 64-byte
// aligned blocks, first fit, whose bytes are out of reach (mprotect PROT_NONE) except between
// open() and close(). Opening and closing are one mprotect call each: the range up to the
// highest byte ever handed out. The checking backend keeps its tensors in one, and its host
// space (offloaded tensors) in another.
#include <cstddef>
#include <map>

namespace sbp {

class ProtectedArena {
 public:
  explicit ProtectedArena(size_t reserve_bytes);
  ~ProtectedArena();
  ProtectedArena(const ProtectedArena&) = delete;
  ProtectedArena& operator=(const ProtectedArena&) = delete;

  void* allocate(size_t bytes);  // nullptr when the reserved range is full
  void release(void* p);         // InternalError for a pointer it did not hand out
  void open();                   // read and write
  void close();                  // no access

 private:
  void protect(int prot);
  char* base_ = nullptr;
  size_t reserved_ = 0;
  size_t top_ = 0;                 // bytes of the range ever handed out (page multiple)
  std::map<size_t, size_t> free_;  // offset -> size of free blocks below top_, coalesced
  std::map<size_t, size_t> used_;  // offset -> size of live blocks
};

}  // namespace sbp
