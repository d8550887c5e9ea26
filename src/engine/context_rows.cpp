#include "engine/context_rows.h"

#include <vector>

#include "core/error.h"
#include "core/memory.h"

namespace sbp {

namespace {

// True when the collective may run on t's bytes themselves.
bool direct(const Tensor& t, const Communicator& group) {
  return !t.memory || !t.memory->holds_data() || t.memory->host_addressable() ||
         group.device_collectives();
}

template <class T>
void gather_host(Communicator& group, const ContextSlice& slice, std::span<T> v) {
  if (!slice.split()) return;
  SBP_CHECK(static_cast<int64_t>(v.size()) == slice.T(), "gather_host_rows: one value per row");
  std::vector<double> mine;
  mine.reserve(static_cast<size_t>(slice.local_rows()));
  for (const RowPiece& p : slice.mine())
    for (int64_t t = p.begin; t < p.end; ++t)
      mine.push_back(static_cast<double>(v[static_cast<size_t>(t)]));
  const std::vector<std::vector<double>> all = group.allgather(std::span<const double>(mine));
  for (const RowPiece& p : slice.pieces()) {
    const std::vector<double>& from = all.at(static_cast<size_t>(p.owner));
    SBP_CHECK(static_cast<int64_t>(from.size()) == slice.local_rows(p.owner),
              "gather_host_rows: a rank sent another number of rows");
    for (int64_t t = p.begin; t < p.end; ++t)
      v[static_cast<size_t>(t)] = static_cast<T>(from[static_cast<size_t>(p.local + t - p.begin)]);
  }
}

}  // namespace

RowCollectives::~RowCollectives() {
  // Unwinding: the requests still complete (MPI needs every rank's part; the bytes they point to
  // live until then).
  for (Request& r : requests_) group_.wait(r);
}

void RowCollectives::gather(const ContextSlice& slice, std::span<const Tensor> ts, size_t p0,
                            size_t p1) {
  if (!slice.split()) return;
  for (const Tensor& t : ts) {
    SBP_CHECK(t.rows() == slice.T(), "gather_rows: a tensor of T rows");
    for (size_t i = p0; i < p1; ++i) {
      const RowPiece& p = slice.pieces()[i];
      if (p.size() == 0) continue;
      const Tensor rows = t.slice_rows(p.begin, p.end);
      const auto bytes = static_cast<int64_t>(rows.nbytes());
      if (direct(t, group_)) {
        requests_.push_back(group_.ibroadcast(rows.data, bytes, p.owner));
        continue;
      }
      Staged s{rows, std::vector<char>(static_cast<size_t>(bytes)), p.owner != slice.rank()};
      if (!s.upload) rows.memory->download(s.bytes.data(), rows);
      requests_.push_back(group_.ibroadcast(s.bytes.data(), bytes, p.owner));
      staged_.push_back(std::move(s));  // moving keeps the bytes where the request has them
    }
  }
}

void RowCollectives::reduce_to_owners(const ContextSlice& slice, std::span<const Tensor> ts,
                                      size_t p0, size_t p1) {
  if (!slice.split()) return;
  for (const Tensor& t : ts) {
    SBP_CHECK(t.rows() == slice.T() && t.dtype == DType::F32,
              "reduce_rows_to_owners: an F32 tensor of T rows");
    for (size_t i = p0; i < p1; ++i) {
      const RowPiece& p = slice.pieces()[i];
      if (p.size() == 0) continue;
      const Tensor rows = t.slice_rows(p.begin, p.end);
      if (direct(t, group_)) {
        requests_.push_back(
            group_.ireduce_sum(static_cast<float*>(rows.data), rows.numel(), p.owner));
        continue;
      }
      Staged s{rows, std::vector<char>(rows.nbytes()), p.owner == slice.rank()};
      rows.memory->download(s.bytes.data(), rows);
      requests_.push_back(
          group_.ireduce_sum(reinterpret_cast<float*>(s.bytes.data()), rows.numel(), p.owner));
      staged_.push_back(std::move(s));
    }
  }
}

void RowCollectives::wait() {
  for (Request& r : requests_) group_.wait(r);
  requests_.clear();
  for (Staged& s : staged_)
    if (s.upload) s.rows.memory->upload(s.rows, s.bytes.data());
  staged_.clear();
}

void gather_rows(Communicator& group, const ContextSlice& slice, std::span<const Tensor> ts) {
  RowCollectives c(group);
  c.gather(slice, ts, 0, slice.pieces().size());
  c.wait();
}

void reduce_rows_to_owners(Communicator& group, const ContextSlice& slice,
                           std::span<const Tensor> ts) {
  RowCollectives c(group);
  c.reduce_to_owners(slice, ts, 0, slice.pieces().size());
  c.wait();
}

void gather_host_rows(Communicator& group, const ContextSlice& slice, std::span<float> v) {
  gather_host(group, slice, v);
}

void gather_host_rows(Communicator& group, const ContextSlice& slice, std::span<int32_t> v) {
  gather_host(group, slice, v);
}

}  // namespace sbp
