#include "dist/data_parallel.h"

#include <cmath>
#include <type_traits>
#include <vector>
#include <cstring>

#include "core/error.h"
#include "optim/optimizer_files.h"

namespace sbp {

DataParallel::DataParallel(Communicator& comm, int zero, const ModelConfig& cfg, ModelHead head,
                           Pool& pool, Backend& be, const AdamWConfig* optim, DType grad_dtype,
                           bool master, bool offload, DType param_dtype)
    : comm_(comm),
      zero_(comm.size() > 1 ? zero : 0),
      pool_(pool),
      be_(be),
      grad_dtype_(grad_dtype),
      tied_lm_head_(head == ModelHead::lm && cfg.tie_word_embeddings),
      grads_(zero_ >= 2 || offload
                 ? ParameterSet::unallocated(cfg, head)
                 : ParameterSet(cfg, pool, Category::grads, grad_dtype, true, head)),
      groups_(grads_),
      offload_(offload) {
  SBP_CHECK(!offload || pool.host() != nullptr,
            "DataParallel: offload: optimizer needs a host pool (Pool::set_host)");
  // Where the optimizer's state lives: the device's pool, or the host's.
  Pool& state = offload ? *pool.host() : pool;
  if (offload) {
    host_ = std::make_unique<HostMath>(state.memory());
    if (zero_ < 2) host_grads_ = ParameterSet(cfg, state, Category::grads, grad_dtype, true, head);
    // Zero 3: the host's copy is of this rank's slices only (image_slices_, below).
    if (zero_ != 3) image_ = ParameterSet(cfg, state, Category::weights, param_dtype, false, head);
  }
  SBP_CHECK(zero >= 0 && zero <= 3, "DataParallel: zero stage " + std::to_string(zero));
  cfg_ = &cfg;
  head_ = head;
  SBP_CHECK(!distributed() || grad_dtype == DType::F32 || !pool.materialize(),
            "DataParallel: ranks exchange F32 gradients");
  SBP_CHECK(!(master && (zero_ == 1 || zero_ == 2)) || !pool.materialize(),
            "DataParallel: sharded optimizers all-gather F32 weights (no bf16 weights with zero 1/2)");
  for (size_t i = 0; i < grads_.size(); ++i) {
    const int64_t n = grads_.shape(i).numel();
    ranges_.push_back(shard_range(n, comm.size(), comm.rank()));
    counts_.push_back(shard_counts(n, comm.size()));
    if (zero_ >= 2)
      shards_.push_back(state.zeros(Category::grads, grad_dtype, {ranges_.back().count}));
    if (zero_ == 3 && offload)
      image_slices_.push_back(state.allocate(Category::weights, param_dtype, {ranges_.back().count}));
  }
  if (optim) {
    if (zero_ == 0)
      adamw_ = std::make_unique<AdamW>(cfg, state, *optim, head, master);
    else
      sharded_ = std::make_unique<ShardedAdamW>(cfg, head, comm.size(), comm.rank(), state,
                                                *optim, master);
  }
}

bool DataParallel::reduces(int64_t slot) const {
  return distributed() && (zero_ >= 2 || slot == slots_ - 1);
}

void DataParallel::begin_step(int64_t slots) {
  SBP_CHECK(in_flight_.empty(), "DataParallel::begin_step with reductions in flight");
  slots_ = slots;
  counters_ = Counters{};
  if (offload_) {
    host_ready();
    for (const Buffer& sh : shards_) host_->fill(sh.view(), 0.0f);
    for (size_t i = 0; i < host_grads_.size(); ++i) host_->fill(host_grads_.tensor(i), 0.0f);
    return;
  }
  if (sharded_weights_) sharded_weights_->reset_counters();
  if (zero_ >= 2) {
    for (const Buffer& s : shards_) be_.fill(s.view(), 0.0f);
  } else {
    for (size_t i = 0; i < grads_.size(); ++i) be_.fill(grads_.tensor(i), 0.0f);
  }
}

GradHook* DataParallel::hook(int64_t slot) {
  slot_ = slot;
  return offload_ || reduces(slot) ? static_cast<GradHook*>(this) : nullptr;
}

void DataParallel::end_slot(int64_t slot) {
  if (reduces(slot)) complete_all();
  if (offload_) release_offloads(0);
  if (sharded_weights_) counters_.gathers = sharded_weights_->gathers();
}

void DataParallel::empty_slot(int64_t slot) {
  if (!reduces(slot)) return;
  slot_ = slot;
  // Zero 0/1: this rank's earlier micro-batches are in the gradients; zero 2: zeros.
  if (sharded_weights_)  // zero 3: the weight gathers too, interleaved as the others send them
    replay_step_events(*this, *sharded_weights_, groups_.layers(), tied_lm_head_);
  else
    replay_grad_events(*this, groups_.layers(), tied_lm_head_);
  complete_all();
  if (offload_) release_offloads(0);
  if (sharded_weights_) counters_.gathers = sharded_weights_->gathers();
}

void DataParallel::grads_begin(GradGroup group, int64_t layer) {
  progress();
  if (offload_) return bind_from_host(group, layer);
  if (zero_ < 2) return;
  for (size_t i : groups_.of(group, layer))
    if (!grads_.attached(i))
      grads_.attach(i, pool_.zeros(Category::grads, grad_dtype_, grads_.shape(i)));
}

namespace {

// The floats a collective on t works on: t's own bytes where other code may address them (or
// where there are none: a shape-only run moves nothing), or where the communicator works on GPU
// memory (`on_device`: F32 tensors), else a host copy in `staged`.
float* collective_data(const Tensor& t, std::vector<float>& staged, bool on_device = false) {
  if (!t.memory || t.memory->host_addressable() || !t.memory->holds_data())
    return static_cast<float*>(t.data);
  if (on_device && t.dtype == DType::F32) return static_cast<float*>(t.data);
  staged = download_f32(t);
  return staged.data();
}

}  // namespace

void DataParallel::move_front_to_slice(const Tensor& g, const ShardRange& r) {
  if (g.memory && !g.memory->host_addressable()) {
    // GPU memory (a device communicator): the backend copies, through a temporary when the
    // two ranges overlap (a copy's source and destination may not).
    const Tensor front = flat_slice(g, ShardRange{0, r.count}), to = flat_slice(g, r);
    if (r.offset >= r.count) {
      be_.copy(to, front);
    } else {
      Buffer tmp = pool_.allocate(Category::grads, g.dtype, {r.count});
      be_.copy(tmp.view(), front);
      be_.copy(to, tmp.view());
    }
    return;
  }
  char* base = static_cast<char*>(g.data);
  const size_t esize = dtype_size(g.dtype);
  std::memmove(base + static_cast<size_t>(r.offset) * esize, base,
               static_cast<size_t>(r.count) * esize);
}

void DataParallel::grads_final(GradGroup group, int64_t layer) {
  if (offload_ && !reduces(slot_)) return offload_group(group, layer);
  std::vector<Pending> issued;
  for (size_t i : groups_.of(group, layer)) {
    const Tensor& g = grads_.tensor(i);
    Pending p;
    float* data = collective_data(g, p.staged, comm_.device_collectives());
    p.tensor = i;
    p.request = zero_ == 0 ? comm_.iallreduce_sum(data, g.numel())
                           : comm_.ireduce_scatter_sum(data, counts_[i]);
    issued.push_back(std::move(p));  // moved: a staged copy keeps its address
    ++counters_.reductions;
    counters_.reduced_bytes += static_cast<int64_t>(g.nbytes());
  }
  in_flight_.push_back(std::move(issued));
  // Zero 2 (and offload): the previous group's buffers go as soon as this group's reduction is
  // on its way, so at most two groups' whole buffers exist at once (and the ledger sees the
  // same moments in a real run as in `streambp plan`).
  if (zero_ >= 2 || offload_)
    while (in_flight_.size() > 1) complete_oldest_group();
}

void DataParallel::progress() {
  // Non-blocking collectives advance inside MPI calls; testing them at each group boundary lets
  // a reduction proceed while the next layer computes.
  for (std::vector<Pending>& group : in_flight_)
    for (Pending& p : group)
      if (!p.done && comm_.test(p.request)) {
        p.done = true;
        ++counters_.done_during_backward;
      }
}

void DataParallel::complete_oldest_group() {
  Offloaded copies;
  for (Pending& p : in_flight_.front()) {
    comm_.wait(p.request);
    const size_t i = p.tensor;
    const ShardRange& r = ranges_[i];
    const Tensor& g = grads_.tensor(i);
    if (!p.staged.empty()) {
      // The reduced numbers from the host copy: zero 0 all of them, zero 1/2 this rank's slice,
      // which arrives at the front (zero 1 puts it where it belongs, zero 2 adds it below).
      const ShardRange got = zero_ == 0 ? ShardRange{0, g.numel()} : r;
      const ShardRange to = zero_ == 1 ? r : ShardRange{0, got.count};
      upload_f32(flat_slice(g, to),
                 std::span<const float>(p.staged.data(), static_cast<size_t>(got.count)));
    } else if (zero_ == 1 && g.data && r.offset > 0) {
      // The reduced slice arrives at the front of the buffer; put it where it belongs.
      move_front_to_slice(g, r);
    }
    if (offload_) {
      offload_reduced(i, copies);
    } else if (zero_ >= 2) {
      be_.add_inplace(shards_[i].view(), flat_slice(g, ShardRange{0, r.count}));
      grads_.detach(i);
    }
  }
  in_flight_.erase(in_flight_.begin());
  if (offload_) {
    offloads_.push_back(std::move(copies));
    release_offloads(1);
  }
}

void DataParallel::complete_all() {
  while (!in_flight_.empty()) complete_oldest_group();
}

Tensor DataParallel::owned_grad(size_t i) const {
  if (zero_ >= 2) return shards_[i].view();
  return flat_slice(held().tensor(i), ranges_[i]);
}

double DataParallel::grad_norm() { return norm_of(local_sum_squares()); }

double DataParallel::local_sum_squares() {
  const std::vector<Tensor> parts = norm_parts();
  if (!offload_) return be_.sum_squares(parts);  // one device wait
  host_ready();
  std::vector<double> each(parts.size());
  host_->sum_squares_each(parts, each);
  double ss = 0.0;
  for (double v : each) ss += v;  // in order, as Backend::sum_squares: the device path's bits
  return ss;
}

std::vector<Tensor> DataParallel::norm_parts() const {
  // Each rank squares its slice of the reduced gradient (all of it alone); the sum over ranks
  // is the global norm, the same value on every rank, so every rank clips alike.
  std::vector<Tensor> g;
  g.reserve(grads_.size());
  for (size_t i = 0; i < grads_.size(); ++i)
    g.push_back(distributed() ? owned_grad(i) : held().tensor(i));
  return g;
}

double DataParallel::norm_of(double local_sum_squares) {
  return std::sqrt(distributed() ? comm_.sum(local_sum_squares) : local_sum_squares);
}

void DataParallel::clip_to(double max_norm, double norm) {
  if (!distributed() && !offload_) return scale_to_max_norm(grads_, be_, max_norm, norm);
  const float scale = clip_factor(max_norm, norm);
  if (scale == 1.0f) return;
  auto scale_all = [&](auto& ops) {
    for (size_t i = 0; i < grads_.size(); ++i)
      ops.scale_inplace(zero_ == 0 ? held().tensor(i) : owned_grad(i), scale);
  };
  if (offload_)
    scale_all(*host_);
  else
    scale_all(be_);
}

void DataParallel::update(const ParameterSet& weights, float lr) {
  SBP_CHECK(adamw_ || sharded_, "DataParallel::update without an optimizer");
  // On the device, or with offload: optimizer on the host's copy of the weights (HostMath).
  auto step = [&](const ParameterSet& w, auto& ops) {
    if (adamw_) return adamw_->step(w, held(), ops, lr);
    std::vector<Tensor> slices;
    for (size_t i = 0; i < grads_.size(); ++i) slices.push_back(owned_grad(i));
    if (sharded_weights_) {
      // Zero 3: the slices are the weights (with offload their host copy, uploaded below);
      // the next pass gathers what it reads.
      std::vector<Tensor> w3 = sharded_weights_->slices();
      if (offload_)
        for (size_t i = 0; i < w3.size(); ++i) w3[i] = image_slices_[i].view();
      sharded_->step_slices(w3, slices, ops, lr);
      return;
    }
    sharded_->step(w, slices, ops, lr);
    gather_updated(w);
  };
  if (!offload_) return step(weights, be_);
  host_ready();
  step(image_, *host_);
  if (sharded_weights_)
    upload_image_slices();
  else
    upload_image(weights);
}

void DataParallel::gather_updated(const ParameterSet& w) {
  // The host's copy is host memory: a communicator reduces it in place where it may address it.
  const bool on_device = !offload_ && comm_.device_collectives();
  std::vector<Request> gathers;
  std::vector<std::vector<float>> staged(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    gathers.push_back(comm_.iallgather(collective_data(w.tensor(i), staged[i], on_device),
                                       counts_[i]));
    ++counters_.gathers;
  }
  for (size_t i = 0; i < gathers.size(); ++i) {
    comm_.wait(gathers[i]);
    if (!staged[i].empty()) upload_f32(w.tensor(i), staged[i]);
  }
}

void DataParallel::save_optimizer(const std::string& dir) const {
  if (sharded_)
    write_optimizer_shard(dir, moment_slices(*sharded_), sharded_->steps(), comm_.rank(),
                          comm_.size());
  else if (adamw_ && comm_.rank() == 0)
    write_optimizer_file(dir, moment_slices(*adamw_), adamw_->steps());
}

void DataParallel::load_optimizer(const std::string& dir) {
  if (sharded_)
    sharded_->set_steps(read_optimizer_state(dir, moment_slices(*sharded_)));
  else if (adamw_)
    adamw_->set_steps(read_optimizer_state(dir, moment_slices(*adamw_)));
}

AdamW& DataParallel::adamw() {
  SBP_CHECK(adamw_ != nullptr,
            "DataParallel::adamw: the optimizer is sharded (zero 1/2) or absent");
  return *adamw_;
}

ParameterSet* DataParallel::master() {
  if (sharded_weights_) {
    if (staging_.size() == 0)
      staging_ = ParameterSet(*cfg_, *staging_pool_, Category::weights, DType::F32, false, head_);
    return &staging_;
  }
  if (adamw_ && adamw_->master()) return adamw_->master();
  return offload_ ? &image_ : nullptr;
}

void DataParallel::weights_loaded(const ParameterSet& weights) {
  if (sharded_weights_) {
    // Zero 3: this rank's slice of the whole fp32 values, rounded into the weights' dtype, and
    // into the optimizer's master slices; then the staging copy goes.
    SBP_CHECK(staging_.size() > 0, "DataParallel::weights_loaded: nothing loaded into master()");
    // The staging copy is in the device's memory space (where a device communicator can
    // gather into it); with offload the master and the image are host memory, reached by
    // copies of one dtype: the image from the rounded device slice.
    Backend::CopyTicket last = 0;
    for (size_t i = 0; i < staging_.size(); ++i) {
      const ShardRange& r = sharded_weights_->range(i);
      if (r.count == 0) continue;
      const Tensor from = flat_slice(staging_.tensor(i), r);
      be_.copy(sharded_weights_->slice(i), from);
      if (offload_) last = be_.offload_async(image_slices_[i].view(), sharded_weights_->slice(i));
      if (!sharded_ || !sharded_->has_master()) continue;
      if (offload_)
        last = be_.offload_async(sharded_->master_slice(i), from);
      else
        be_.copy(sharded_->master_slice(i), from);
    }
    if (last) be_.wait_copy(last);
    release_staging();
    return;
  }
  const ParameterSet* m = adamw_ ? adamw_->master() : nullptr;
  if (offload_) host_ready();
  for (size_t i = 0; m && i < weights.size(); ++i) {
    if (offload_)
      host_->copy(image_.tensor(i), m->tensor(i));  // rounded to the weights' dtype
    else
      be_.copy(weights.tensor(i), m->tensor(i));
  }
  if (offload_) upload_image(weights);
}

void DataParallel::weights_set(const ParameterSet& weights) {
  SBP_CHECK(!sharded_weights_,
            "DataParallel::weights_set: the weights are sharded (zero 3); load them through "
            "master() and weights_loaded()");
  ParameterSet* m = adamw_ ? adamw_->master() : nullptr;
  if (!offload_) {
    for (size_t i = 0; m && i < weights.size(); ++i) be_.copy(m->tensor(i), weights.tensor(i));
    return;
  }
  Backend::CopyTicket last = 0;
  for (size_t i = 0; i < weights.size(); ++i)
    last = be_.offload_async(image_.tensor(i), weights.tensor(i));
  if (last) be_.wait_copy(last);
  host_ready();
  for (size_t i = 0; m && i < weights.size(); ++i) host_->copy(m->tensor(i), image_.tensor(i));
}

void DataParallel::shard_weights(ParameterSet& weights, DType dtype) {
  SBP_CHECK(zero_ == 3, "DataParallel::shard_weights: only zero 3 shards the weights");
  sharded_weights_ =
      std::make_unique<ShardedWeights>(comm_, weights, pool_, be_, dtype, tied_lm_head_);
  staging_ledger_ = std::make_unique<Ledger>();
  staging_pool_ = std::make_unique<Pool>(*staging_ledger_, pool_.memory());
}

std::vector<Tensor> DataParallel::weight_slices() const {
  return sharded_weights_ ? sharded_weights_->slices() : std::vector<Tensor>{};
}

const ParameterSet& DataParallel::gather_values() {
  SBP_CHECK(sharded_weights_ != nullptr, "DataParallel::gather_values: zero 3 only");
  master();  // the staging copy, in the device's memory space
  std::vector<Request> gathers;
  std::vector<std::vector<float>> staged(staging_.size());
  for (size_t i = 0; i < staging_.size(); ++i) {
    const ShardRange& r = sharded_weights_->range(i);
    const Tensor& whole = staging_.tensor(i);
    // The fp32 values: the master slice (bf16 weights; with offload in host memory, copied
    // in), else the device's slice itself (with offload uploaded from the host's after each
    // update).
    const bool master = sharded_ && sharded_->has_master();
    if (r.count > 0 && master && offload_)
      be_.wait_copy(be_.prefetch_async(flat_slice(whole, r), sharded_->master_slice(i)));
    else if (r.count > 0)
      be_.copy(flat_slice(whole, r), master ? sharded_->master_slice(i) : sharded_weights_->slice(i));
    gathers.push_back(comm_.iallgather(
        collective_data(whole, staged[i], comm_.device_collectives()), counts_[i]));
  }
  for (size_t i = 0; i < gathers.size(); ++i) {
    comm_.wait(gathers[i]);
    if (!staged[i].empty()) upload_f32(staging_.tensor(i), staged[i]);
  }
  return staging_;
}

void DataParallel::release_staging() { staging_ = ParameterSet(); }

int64_t DataParallel::optimizer_steps() const {
  return adamw_ ? adamw_->steps() : sharded_ ? sharded_->steps() : 0;
}

}  // namespace sbp
