#include "dist/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/error.h"

namespace sbp {

namespace {

// MPI's error code as an exception naming the call, on one line (the communicator returns
// errors rather than ending the process: MPI_ERRORS_RETURN below), so that the rank reports it
// the way it reports any error and ends the run (cli/cmd_train.cpp).
void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING + 1] = {};
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS || len <= 0)
      len = std::snprintf(msg, sizeof msg, "error code %d", rc);
    std::string text(msg, static_cast<size_t>(std::min(len, MPI_MAX_ERROR_STRING)));
    for (char& ch : text)
      if (ch == '\n' || ch == '\r') ch = ' ';
    throw Error(std::string("MPI: ") + what + " failed: " + text);
  }
}

int as_count(int64_t n, const char* what) {
  if (n < 0 || n > INT_MAX)
    throw Error(std::string("MPI: ") + what + ": " + std::to_string(n) +
                " elements do not fit one collective");
  return static_cast<int>(n);
}

class MpiCommunicator final : public Communicator {
 public:
  // The world: MPI_Init here, MPI_Finalize in the destructor.
  MpiCommunicator() : comm_(MPI_COMM_WORLD), world_(true) {
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    init();
  }
  // A group split from another communicator (split()); freed, not finalised, when destroyed.
  explicit MpiCommunicator(MPI_Comm group) : comm_(group), world_(false) { init(); }
  ~MpiCommunicator() override {
    for (Slot& s : slots_)
      if (s.request != MPI_REQUEST_NULL) MPI_Wait(&s.request, MPI_STATUS_IGNORE);
    if (world_)
      MPI_Finalize();
    else
      MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void sum(std::span<double> x) override {
    check(MPI_Allreduce(MPI_IN_PLACE, x.data(), as_count(static_cast<int64_t>(x.size()), "sum"),
                        MPI_DOUBLE, MPI_SUM, comm_),
          "MPI_Allreduce");
  }
  void sum(std::span<int64_t> x) override {
    check(MPI_Allreduce(MPI_IN_PLACE, x.data(), as_count(static_cast<int64_t>(x.size()), "sum"),
                        MPI_INT64_T, MPI_SUM, comm_),
          "MPI_Allreduce");
  }
  void max(std::span<int64_t> x) override {
    check(MPI_Allreduce(MPI_IN_PLACE, x.data(), as_count(static_cast<int64_t>(x.size()), "max"),
                        MPI_INT64_T, MPI_MAX, comm_),
          "MPI_Allreduce");
  }

  std::vector<std::vector<double>> allgather(std::span<const double> mine) override {
    std::vector<int> counts, displs;
    const int total = gather_counts(static_cast<int64_t>(mine.size()), counts, displs);
    std::vector<double> all(static_cast<size_t>(total));
    check(MPI_Allgatherv(mine.data(), counts[static_cast<size_t>(rank_)], MPI_DOUBLE, all.data(),
                         counts.data(), displs.data(), MPI_DOUBLE, comm_),
          "MPI_Allgatherv");
    std::vector<std::vector<double>> out;
    for (int r = 0; r < size_; ++r)
      out.emplace_back(
          all.begin() + displs[static_cast<size_t>(r)],
          all.begin() + displs[static_cast<size_t>(r)] + counts[static_cast<size_t>(r)]);
    return out;
  }
  std::vector<std::string> allgather(const std::string& mine) override {
    std::vector<int> counts, displs;
    const int total = gather_counts(static_cast<int64_t>(mine.size()), counts, displs);
    std::string all(static_cast<size_t>(total), '\0');
    check(MPI_Allgatherv(mine.data(), counts[static_cast<size_t>(rank_)], MPI_CHAR, all.data(),
                         counts.data(), displs.data(), MPI_CHAR, comm_),
          "MPI_Allgatherv");
    std::vector<std::string> out;
    for (int r = 0; r < size_; ++r)
      out.push_back(all.substr(static_cast<size_t>(displs[static_cast<size_t>(r)]),
                               static_cast<size_t>(counts[static_cast<size_t>(r)])));
    return out;
  }
  void barrier() override { check(MPI_Barrier(comm_), "MPI_Barrier"); }
  [[noreturn]] void abort(int exit_code) override {
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);  // MPI_Abort does not return; this is for the compiler
  }

  Request ibroadcast(void* x, int64_t bytes, int root) override {
    const int64_t id = take_slot();
    check(MPI_Ibcast(x, as_count(bytes, "broadcast"), MPI_BYTE, root, comm_,
                     &slots_[static_cast<size_t>(id)].request),
          "MPI_Ibcast");
    return Request{id};
  }
  Request ireduce_sum(float* x, int64_t n, int root) override {
    const int64_t id = take_slot();
    check(MPI_Ireduce(rank_ == root ? MPI_IN_PLACE : x, rank_ == root ? x : nullptr,
                      as_count(n, "reduce"), MPI_FLOAT, MPI_SUM, root, comm_,
                      &slots_[static_cast<size_t>(id)].request),
          "MPI_Ireduce");
    return Request{id};
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm group = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, color, key, &group), "MPI_Comm_split");
    return std::make_unique<MpiCommunicator>(group);
  }

  Request iallreduce_sum(float* x, int64_t n) override {
    const int64_t id = take_slot();
    check(MPI_Iallreduce(MPI_IN_PLACE, x, as_count(n, "allreduce"), MPI_FLOAT, MPI_SUM,
                         comm_, &slots_[static_cast<size_t>(id)].request),
          "MPI_Iallreduce");
    return Request{id};
  }
  Request ireduce_scatter_sum(float* x, std::span<const int64_t> counts) override {
    const int64_t id = take_slot();
    Slot& s = slots_[static_cast<size_t>(id)];
    set_counts(s, counts, "reduce_scatter");
    check(MPI_Ireduce_scatter(MPI_IN_PLACE, x, s.counts.data(), MPI_FLOAT, MPI_SUM, comm_,
                              &s.request),
          "MPI_Ireduce_scatter");
    return Request{id};
  }
  Request iallgather(float* x, std::span<const int64_t> counts) override {
    const int64_t id = take_slot();
    Slot& s = slots_[static_cast<size_t>(id)];
    set_counts(s, counts, "allgather");
    check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, s.counts.data(), s.displs.data(),
                          MPI_FLOAT, comm_, &s.request),
          "MPI_Iallgatherv");
    return Request{id};
  }
  bool test(Request& r) override {
    if (!r.pending()) return true;
    int done = 0;
    check(MPI_Test(&slots_[static_cast<size_t>(r.id)].request, &done, MPI_STATUS_IGNORE),
          "MPI_Test");
    if (done) release(r);
    return done != 0;
  }
  void wait(Request& r) override {
    if (!r.pending()) return;
    check(MPI_Wait(&slots_[static_cast<size_t>(r.id)].request, MPI_STATUS_IGNORE), "MPI_Wait");
    release(r);
  }

 private:
  void init() {
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    // MPI's default ends the process from inside the library on any error (with a page of
    // output per rank); returned codes become exceptions with one line naming the collective.
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  }

  // A request and the count arrays MPI reads until it completes (they must outlive the call).
  struct Slot {
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<int> counts, displs;
  };

  int gather_counts(int64_t mine, std::vector<int>& counts, std::vector<int>& displs) {
    int n = as_count(mine, "allgather");
    counts.assign(static_cast<size_t>(size_), 0);
    check(MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, comm_),
          "MPI_Allgather");
    displs.assign(static_cast<size_t>(size_), 0);
    int64_t total = 0;
    for (int r = 0; r < size_; ++r) {
      displs[static_cast<size_t>(r)] = as_count(total, "allgather");
      total += counts[static_cast<size_t>(r)];
    }
    return as_count(total, "allgather");
  }
  void set_counts(Slot& s, std::span<const int64_t> counts, const char* what) {
    SBP_CHECK(static_cast<int>(counts.size()) == size_, std::string(what) + ": one count per rank");
    s.counts.resize(counts.size());
    s.displs.resize(counts.size());
    int64_t at = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      s.counts[r] = as_count(counts[r], what);
      s.displs[r] = as_count(at, what);
      at += counts[r];
    }
  }
  int64_t take_slot() {
    if (free_.empty()) {
      slots_.emplace_back();
      return static_cast<int64_t>(slots_.size()) - 1;
    }
    const int64_t id = free_.back();
    free_.pop_back();
    return id;
  }
  void release(Request& r) {
    slots_[static_cast<size_t>(r.id)].request = MPI_REQUEST_NULL;
    free_.push_back(r.id);
    r.id = -1;
  }

  MPI_Comm comm_;
  bool world_;  // MPI_COMM_WORLD, whose object owns MPI's init/finalize
  int rank_ = 0, size_ = 1;
  std::vector<Slot> slots_;  // by request id; moving a Slot keeps the count arrays MPI reads
  std::vector<int64_t> free_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() {
  return std::make_unique<MpiCommunicator>();
}

}  // namespace sbp
