#pragma once
// The residual-stream gradient gy (Tl, d) F32 of a step's backward: dL/d(hidden) after the
// head, dL/dx_l after each layer, in place (engine.cpp). It grows with T like the checkpoints
// and is touched one chunk of rows at a time, so with Offload::residual_grad it waits in host
// memory and only the chunk being worked on is on the device (DESIGN §4 "Offload").
//
//   open(a, b)  rows [a, b) on the device: a view of gy, or (offloaded) a device buffer the
//               host rows were copied into (the copy is waited for: the chunk's backward
//               reads them at once)
//   close()     ends the open rows: (offloaded) their copy back to the host is queued and the
//               buffer released once it is done, which the next close() or finish() waits for,
//               so the copy back overlaps the next chunk's compute
//
// One range is open at a time. Without offload, open() is a view and close() does nothing: the
// step, its memory and its bits are the same as with a plain (Tl, d) buffer.
#include <cstdint>

#include "backend/backend.h"
#include "core/pool.h"

namespace sbp {

class ResidualGrad {
 public:
  // `host` null: gy on the device (pool `device`); else in `host` (a host pool).
  ResidualGrad(Backend& be, Pool& device, Pool* host, int64_t rows, int64_t d);
  ResidualGrad(const ResidualGrad&) = delete;
  ResidualGrad& operator=(const ResidualGrad&) = delete;
  ~ResidualGrad();

  int64_t rows() const { return rows_; }
  bool offloaded() const { return host_ != nullptr; }
  Tensor open(int64_t a, int64_t b);
  void close();
  // Waits for the last copy back; after it the host rows hold every close()d chunk.
  void finish();

 private:
  Backend& be_;
  Pool& device_;
  Pool* host_;
  int64_t rows_, d_;
  Buffer whole_;     // (rows, d) on the device, or in host memory when offloaded
  Buffer open_buf_;  // (b - a, d) the open rows' device copy (offloaded)
  int64_t open_a_ = -1, open_b_ = -1;
  Buffer leaving_;  // the last closed rows' device copy, its copy back in flight
  int64_t leaving_a_ = 0, leaving_b_ = 0;
  Backend::CopyTicket leaving_copy_ = 0;
};

}  // namespace sbp
