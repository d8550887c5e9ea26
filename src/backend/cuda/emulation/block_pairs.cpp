// Two blocks of one launch run as if at the same time (runtime_internal.h, scheduler.cpp).
//
// The fibres of one block at a time share the host thread, and a block's global memory writes
// are plain stores: a race between blocks (two blocks' non-atomic read-modify-write of one
// element) would never lose an update if blocks ran one after another. So for a pair of blocks
// the emulation gives the second block the memory as it was before the first ran, which a GPU
// running them at the same time may, and merges their writes afterwards:
//  - block A runs with every device allocation read-only; its first write to a page faults
//    (runtime.cpp's SIGSEGV handler calls pair_on_fault), the page's bytes are saved and the
//    page made writable, and the store is retried;
//  - before block B, each page A wrote is saved as A left it and set back to what it held
//    before, and made read-only again;
//  - block B runs the same way (its first write to a page A did not write saves that page too);
//  - after it, every page A wrote is merged byte by byte from the three versions: a byte only
//    one block changed takes that block's value; a byte both changed to the same value keeps it
//    (one update lost: two blocks that each added 1 leave 1, a wrong result); a byte both changed
//    to different values is a race, reported. Block B's atomics are applied again onto the merged
//    bytes (device.h), so concurrent atomics all count as on the GPU.
// More than kPages pages written: the pair gives up (memory writable, the blocks' writes in
// sequence), which is still a valid execution.
//
// Global state: the emulated device's (one host thread runs the queue); the page store is
// reserved once and reused.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "runtime_internal.h"

namespace sbp::cudaemu {

bool pair_recording_atomics = false;

namespace {

constexpr size_t kPages = 4096;     // pages one pair may write (16 MiB each version)
constexpr size_t kSlots = 2 * kPages;  // open-addressing table of page -> record

struct PageRecord {
  uintptr_t page;
  bool by_a;
};

struct Atomic {
  uintptr_t p;
  size_t bytes;
  std::function<void()> replay;
};

enum class Phase { off, a, b };

struct Pairs {
  size_t page = 4096;
  Phase phase = Phase::off;
  bool gave_up = false;
  bool swapped = false;  // block B saw memory as before block A: merge at the end
  size_t count = 0;
  PageRecord rec[kPages];
  int32_t slot[kSlots];
  char* orig = nullptr;   // kPages pages: before the pair
  char* a_ver = nullptr;  // kPages pages: as block A left them
  std::vector<Atomic> atomics;

  Pairs() {
    page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void* m = mmap(nullptr, 2 * kPages * page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m != MAP_FAILED) {
      orig = static_cast<char*>(m);
      a_ver = orig + kPages * page;
    }
    std::memset(slot, -1, sizeof slot);
  }
  char* orig_of(size_t i) { return orig + i * page; }
  char* a_of(size_t i) { return a_ver + i * page; }

  // The record of `p` (a page address), or -1; *at: where it goes if absent.
  int32_t find(uintptr_t p, size_t* at) const {
    size_t h = (p / page * 0x9e3779b97f4a7c15ull) % kSlots;
    while (slot[h] >= 0) {
      if (rec[slot[h]].page == p) return slot[h];
      h = (h + 1) % kSlots;
    }
    *at = h;
    return -1;
  }
  void clear() {
    if (count) std::memset(slot, -1, sizeof slot);
    count = 0;
    atomics.clear();
    phase = Phase::off;
    gave_up = swapped = false;
    pair_recording_atomics = false;
  }
  void give_up() {
    protect_device(PROT_READ | PROT_WRITE);
    gave_up = true;
    pair_recording_atomics = false;
  }
};

Pairs& pairs() {
  static Pairs* p = new Pairs;
  return *p;
}

}  // namespace

void pair_begin() {
  Pairs& P = pairs();
  P.clear();
  if (!P.orig) return;  // no page store: the blocks run in sequence
  P.phase = Phase::a;
  protect_device(PROT_READ);
}

void pair_switch() {
  Pairs& P = pairs();
  if (P.phase != Phase::a) return;
  P.phase = Phase::b;
  if (P.gave_up) return;  // B sees A's writes: the blocks in sequence
  P.swapped = true;
  for (size_t i = 0; i < P.count; ++i) {
    void* pg = reinterpret_cast<void*>(P.rec[i].page);
    std::memcpy(P.a_of(i), pg, P.page);
    std::memcpy(pg, P.orig_of(i), P.page);
    mprotect(pg, P.page, PROT_READ);
  }
  pair_recording_atomics = true;
}

bool pair_on_fault(void* addr) {
  Pairs& P = pairs();
  if (P.phase == Phase::off || P.gave_up || !device_range(addr, 1)) return false;
  const uintptr_t pg = reinterpret_cast<uintptr_t>(addr) / P.page * P.page;
  size_t at = 0;
  const int32_t i = P.find(pg, &at);
  if (i < 0) {
    if (P.count == kPages) {
      P.give_up();
      return true;
    }
    const size_t n = P.count++;
    P.rec[n] = PageRecord{pg, P.phase == Phase::a};
    P.slot[at] = static_cast<int32_t>(n);
    std::memcpy(P.orig_of(n), reinterpret_cast<void*>(pg), P.page);  // readable: PROT_READ
  } else if (P.phase == Phase::a) {
    return false;  // already writable: not our fault
  }
  mprotect(reinterpret_cast<void*>(pg), P.page, PROT_READ | PROT_WRITE);
  return true;
}

void pair_atomic(void* p, size_t bytes, std::function<void()> replay) {
  pairs().atomics.push_back(Atomic{reinterpret_cast<uintptr_t>(p), bytes, std::move(replay)});
}

std::string pair_end() {
  Pairs& P = pairs();
  if (P.phase == Phase::off) return "";
  pair_recording_atomics = false;
  protect_device(PROT_READ | PROT_WRITE);
  std::string race;
  if (P.swapped) {
    auto in_atomic = [&](uintptr_t a) {
      for (const Atomic& x : P.atomics)
        if (a >= x.p && a < x.p + x.bytes) return true;
      return false;
    };
    // Block A's pages: three-way merge (B's version is what memory holds now).
    for (size_t i = 0; i < P.count; ++i) {
      if (!P.rec[i].by_a) continue;
      auto* mem = reinterpret_cast<unsigned char*>(P.rec[i].page);
      const auto* o = reinterpret_cast<const unsigned char*>(P.orig_of(i));
      const auto* a = reinterpret_cast<const unsigned char*>(P.a_of(i));
      for (size_t k = 0; k < P.page; ++k) {
        if (a[k] == o[k]) continue;          // A left it: B's (or the old) value stays
        if (mem[k] == o[k] || mem[k] == a[k]) {  // B left it, or wrote A's value too
          mem[k] = a[k];
          continue;
        }
        if (in_atomic(P.rec[i].page + k)) {  // set again below
          mem[k] = a[k];
          continue;
        }
        if (race.empty()) {
          char msg[200];
          std::snprintf(msg, sizeof msg, "wrote different values to the byte at %p in one launch",
                        reinterpret_cast<void*>(P.rec[i].page + k));
          race = msg;
        }
      }
    }
    // Block B's atomics onto the merged bytes: first their bytes as block A (or nobody) left
    // them, then each operation again, in B's order.
    for (const Atomic& x : P.atomics) {
      for (size_t b = 0; b < x.bytes; ++b) {
        const uintptr_t addr = x.p + b, pg = addr / P.page * P.page;
        size_t at = 0;
        const int32_t i = P.find(pg, &at);
        if (i < 0) continue;  // a page B did not change: nothing to undo
        const size_t off = addr - pg;
        *reinterpret_cast<unsigned char*>(addr) =
            P.rec[i].by_a ? P.a_of(static_cast<size_t>(i))[off] : P.orig_of(static_cast<size_t>(i))[off];
      }
    }
    for (const Atomic& x : P.atomics) x.replay();
  }
  P.clear();
  return race;
}

void pair_abort() {
  Pairs& P = pairs();
  if (P.phase == Phase::off) return;
  protect_device(PROT_READ | PROT_WRITE);
  P.clear();
}

}  // namespace sbp::cudaemu
