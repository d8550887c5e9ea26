#pragma once
// A shape-only rank that counts what its collectives would move, for the time planner
// (plan/time_model.h): the engine's own calls, so the planner's communication is the run's.
// Sizes are the collective's whole buffer (every rank's blocks); the time model applies the
// ring algorithm's factors ((r-1)/r per pass) itself.
#include <cstdint>
#include <numeric>

#include "core/communicator.h"

namespace sbp {

struct CollectiveBytes {
  int64_t allreduce = 0;       // iallreduce_sum: gradients (data parallel)
  int64_t reduce_scatter = 0;  // ireduce_scatter_sum: gradients to their owners (ZeRO)
  int64_t allgather = 0;       // iallgather: weights from their owners (ZeRO)
  int64_t broadcast = 0;       // ibroadcast: K/V rows (context parallel)
  int64_t reduce = 0;          // ireduce_sum: dK/dV rows back to their owner (context parallel)
  int64_t calls = 0;
  int64_t total() const { return allreduce + reduce_scatter + allgather + broadcast + reduce; }
};

class CountingCommunicator final : public ShapeOnlyCommunicator {
 public:
  CountingCommunicator(int rank, int ranks) : ShapeOnlyCommunicator(rank, ranks) {}
  const CollectiveBytes& bytes() const { return bytes_; }

  Request iallreduce_sum(float* x, int64_t n) override {
    add(bytes_.allreduce, 4 * n);
    return ShapeOnlyCommunicator::iallreduce_sum(x, n);
  }
  Request ireduce_scatter_sum(float* x, std::span<const int64_t> counts) override {
    add(bytes_.reduce_scatter, 4 * sum(counts));
    return ShapeOnlyCommunicator::ireduce_scatter_sum(x, counts);
  }
  Request iallgather(float* x, std::span<const int64_t> counts) override {
    add(bytes_.allgather, 4 * sum(counts));
    return ShapeOnlyCommunicator::iallgather(x, counts);
  }
  Request ibroadcast(void* x, int64_t bytes, int root) override {
    add(bytes_.broadcast, bytes);
    return ShapeOnlyCommunicator::ibroadcast(x, bytes, root);
  }
  Request ireduce_sum(float* x, int64_t n, int root) override {
    add(bytes_.reduce, 4 * n);
    return ShapeOnlyCommunicator::ireduce_sum(x, n, root);
  }

 private:
  static int64_t sum(std::span<const int64_t> c) {
    return std::accumulate(c.begin(), c.end(), int64_t{0});
  }
  void add(int64_t& field, int64_t b) {
    field += b;
    bytes_.calls += 1;
  }
  CollectiveBytes bytes_;
};

}  // namespace sbp
