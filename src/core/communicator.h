#pragma once
// The collectives data- and context-parallel training need (docs/DISTRIBUTED.md), behind an
// interface so that nothing outside src/dist/ includes MPI. The interface needs only the
// standard library and lives in core, so that the engine's context-parallel step can use it.
// Implementations: MPI (dist/mpi_communicator.cpp, built when CMake finds MPI), NCCL
// (dist/nccl_communicator.cpp), one process on its own, and a shape-only stand-in of rank r of
// R that the planner runs the real gradient-sharding code against without any communication.
//
// Every rank must call the collectives in the same order (MPI's rule, for the non-blocking ones
// too); the step runner arranges a step so that they do (src/step/step_runner.h).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace sbp {

// A non-blocking collective in flight; complete it with Communicator::test or wait.
struct Request {
  int64_t id = -1;
  bool pending() const { return id >= 0; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // ---- blocking, small ----
  virtual void sum(std::span<double> x) = 0;  // element-wise over ranks, in place
  virtual void sum(std::span<int64_t> x) = 0;
  virtual void max(std::span<int64_t> x) = 0;
  // Every rank's `mine`, in rank order.
  virtual std::vector<std::vector<double>> allgather(std::span<const double> mine) = 0;
  virtual std::vector<std::string> allgather(const std::string& mine) = 0;
  virtual void barrier() = 0;
  // Ends every rank's process at once (a rank that failed while others wait in a collective).
  [[noreturn]] virtual void abort(int exit_code) = 0;

  // ---- non-blocking, fp32, in place (gradients and weights) ----
  // x (n) := the sum of every rank's x.
  virtual Request iallreduce_sum(float* x, int64_t n) = 0;
  // x holds this rank's contribution to a tensor cut into blocks of counts[r] consecutive
  // elements (rank order). Afterwards x[0, counts[rank]) is the sum over ranks of this rank's
  // block; the rest of x is unspecified.
  virtual Request ireduce_scatter_sum(float* x, std::span<const int64_t> counts) = 0;
  // Block r of x (counts[r] elements after those of ranks < r) comes from rank r's x.
  virtual Request iallgather(float* x, std::span<const int64_t> counts) = 0;
  // ---- non-blocking, in place (context parallelism: K/V rows and their gradients) ----
  // The `bytes` bytes at x on every rank := those of rank `root` (any dtype: moved, not summed).
  virtual Request ibroadcast(void* x, int64_t bytes, int root) = 0;
  // On rank `root`, x (n) := the sum of every rank's x; on the others x is unspecified after.
  virtual Request ireduce_sum(float* x, int64_t n, int root) = 0;
  virtual bool test(Request& r) = 0;  // true (and r no longer pending) when complete
  virtual void wait(Request& r) = 0;
  // True when the fp32 collectives take pointers into GPU memory (NCCL: nccl_communicator.h)
  // instead of host memory, so that GPU tensors need no host copy.
  virtual bool device_collectives() const { return false; }

  // ---- groups ----
  // The ranks of this communicator that pass the same `color`, ordered by `key` (MPI_Comm_split):
  // a collective over every rank of this communicator. The result must be destroyed before this
  // one. (A device communicator is made over a host group: dist/world.h make_gpu_collectives.)
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // Convenience: sum of one value; maximum of one value.
  double sum(double x);
  int64_t sum(int64_t x);
  int64_t max(int64_t x);
};

// Rank `rank` of `ranks` with no data moving (every collective completes at once, leaving its
// buffers as they are): lets `streambp plan` run the gradient-sharding code of a rank on the
// shape-only backend, with the same allocations a real rank makes.
class ShapeOnlyCommunicator : public Communicator {
 public:
  ShapeOnlyCommunicator(int rank, int ranks);
  using Communicator::max;
  using Communicator::sum;
  int rank() const override { return rank_; }
  int size() const override { return ranks_; }
  void sum(std::span<double>) override {}
  void sum(std::span<int64_t>) override {}
  void max(std::span<int64_t>) override {}
  std::vector<std::vector<double>> allgather(std::span<const double> mine) override;
  std::vector<std::string> allgather(const std::string& mine) override;
  void barrier() override {}
  [[noreturn]] void abort(int exit_code) override;
  Request iallreduce_sum(float*, int64_t) override { return {}; }
  Request ireduce_scatter_sum(float*, std::span<const int64_t>) override { return {}; }
  Request iallgather(float*, std::span<const int64_t>) override { return {}; }
  Request ibroadcast(void*, int64_t, int) override { return {}; }
  Request ireduce_sum(float*, int64_t, int) override { return {}; }
  bool test(Request& r) override;
  void wait(Request& r) override { r.id = -1; }
  // Every rank of a shape-only world: the same stand-in for rank 0 of a group of one when the
  // color is unique, which is all one process alone can say (the planner builds its context
  // group as ShapeOnlyCommunicator(r, C) instead).
  std::unique_ptr<Communicator> split(int color, int key) override;

 private:
  int rank_, ranks_;
};

// One process alone: every collective of one rank is the identity, which is what moving no
// data does for rank 0 of 1.
class SingleProcess final : public ShapeOnlyCommunicator {
 public:
  SingleProcess() : ShapeOnlyCommunicator(0, 1) {}
};

// A SingleProcess for everyone: it holds no mutable state.
Communicator& single_process();

}  // namespace sbp
