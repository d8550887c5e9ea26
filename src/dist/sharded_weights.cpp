#include "dist/sharded_weights.h"

#include "core/error.h"
#include "optim/sharded_adamw.h"

namespace sbp {

ShardedWeights::ShardedWeights(Communicator& comm, ParameterSet& weights, Pool& pool, Backend& be,
                               DType dtype, bool tied_lm_head)
    : comm_(comm),
      w_(weights),
      pool_(pool),
      be_(be),
      groups_(weights),
      tied_(tied_lm_head),
      users_(weights.size(), 0),
      flight_(weights.size()) {
  for (size_t i = 0; i < weights.size(); ++i) {
    SBP_CHECK(!weights.attached(i), "ShardedWeights: the weights must be unallocated");
    const int64_t n = weights.shape(i).numel();
    ranges_.push_back(shard_range(n, comm.size(), comm.rank()));
    counts_.push_back(shard_counts(n, comm.size()));
    slices_.push_back(pool.allocate(Category::weights, dtype, {ranges_.back().count}));
  }
}

std::vector<Tensor> ShardedWeights::slices() const {
  std::vector<Tensor> out;
  for (const Buffer& b : slices_) out.push_back(b.view());
  return out;
}

bool ShardedWeights::idle() const {
  for (size_t i = 0; i < w_.size(); ++i)
    if (w_.attached(i) || flight_[i]) return false;
  return true;
}

std::vector<size_t> ShardedWeights::tensors_of(GradGroup group, int64_t layer) const {
  std::vector<size_t> t = groups_.of(group, layer);
  if (group == GradGroup::head && tied_) {
    const std::vector<size_t>& e = groups_.of(GradGroup::embedding, -1);
    t.insert(t.end(), e.begin(), e.end());
  }
  return t;
}

void ShardedWeights::issue(size_t i) {
  const Shape& shape = w_.shape(i);
  const DType dtype = slices_[i].view().dtype;
  w_.attach(i, pool_.allocate(Category::weights, dtype, shape));
  const Tensor& whole = w_.tensor(i);
  // This rank's slice at its place; the gather (in place) fills the others'.
  if (ranges_[i].count > 0) be_.copy(flat_slice(whole, ranges_[i]), slices_[i].view());
  InFlight f;
  float* data = static_cast<float*>(whole.data);  // a shape-only run: nothing moves
  const bool direct = !whole.memory || !whole.memory->holds_data() ||
                      (dtype == DType::F32 && (whole.memory->host_addressable() ||
                                               comm_.device_collectives()));
  if (!direct) {
    // Memory the communicator cannot address, or bf16: through an fp32 host copy (exact).
    f.staged = download_f32(whole);
    data = f.staged.data();
  }
  f.request = comm_.iallgather(data, counts_[i]);
  flight_[i] = std::move(f);  // moved: the staged copy keeps its address
  ++gathers_;
}

void ShardedWeights::complete(size_t i) {
  InFlight& f = *flight_[i];
  comm_.wait(f.request);
  if (!f.staged.empty()) upload_f32(w_.tensor(i), f.staged);
  flight_[i].reset();
}

void ShardedWeights::weights_acquire(GradGroup group, int64_t layer) {
  for (size_t i : tensors_of(group, layer)) {
    if (!w_.attached(i)) issue(i);
    ++users_[i];
  }
  for (size_t i : tensors_of(group, layer))
    if (flight_[i]) complete(i);
}

void ShardedWeights::weights_prefetch(GradGroup group, int64_t layer) {
  for (size_t i : tensors_of(group, layer))
    if (!w_.attached(i)) issue(i);
}

void ShardedWeights::weights_release(GradGroup group, int64_t layer) {
  for (size_t i : tensors_of(group, layer)) {
    SBP_CHECK(users_[i] > 0, "ShardedWeights: " + w_.name(i) + " released but not acquired");
    if (--users_[i] == 0) {
      if (flight_[i]) complete(i);  // a prefetch of it still travelling (never read)
      w_.detach(i);
    }
  }
}

}  // namespace sbp
