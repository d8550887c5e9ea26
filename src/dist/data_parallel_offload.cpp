// DataParallel with offload: optimizer (data_parallel.h): how a group's gradient buffers come
// from and go to host memory around the backward that writes them.
#include "core/error.h"
#include "dist/data_parallel.h"

namespace sbp {

void DataParallel::bind_from_host(GradGroup group, int64_t layer) {
  Backend::CopyTicket last = 0;
  for (size_t i : groups_.of(group, layer)) {
    if (grads_.attached(i)) continue;
    // The step's first slot (every slot with zero 2, whose sums are the reduced shards) starts
    // from zeros. A later slot continues the host's sum on the device, so the device adds
    // this slot's gradient to it exactly as it would to a sum it had kept.
    if (zero_ >= 2 || slot_ == 0) {
      grads_.attach(i, pool_.zeros(Category::grads, grad_dtype_, grads_.shape(i)));
    } else {
      Buffer b = pool_.allocate(Category::grads, grad_dtype_, grads_.shape(i));
      last = be_.prefetch_async(b.view(), host_grads_.tensor(i));
      grads_.attach(i, std::move(b));
    }
  }
  if (last) be_.wait_copy(last);  // the backward adds to them next
}

void DataParallel::offload_group(GradGroup group, int64_t layer) {
  Offloaded copies;
  for (size_t i : groups_.of(group, layer)) {
    copies.ticket = be_.offload_async(host_grads_.tensor(i), grads_.tensor(i));
    copies.tensors.push_back(i);
  }
  offloads_.push_back(std::move(copies));
  // The previous group's copy has had this group's backward to run in.
  release_offloads(1);
}

void DataParallel::offload_reduced(size_t i, Offloaded& out) {
  const Tensor& g = grads_.tensor(i);
  const ShardRange& r = ranges_[i];
  out.tensors.push_back(i);
  if (zero_ == 0) {
    out.ticket = be_.offload_async(host_grads_.tensor(i), g);
  } else if (zero_ == 1 && r.count > 0) {
    // Only this rank's reduced slice is read after the step (owned_grad).
    out.ticket = be_.offload_async(flat_slice(host_grads_.tensor(i), r), flat_slice(g, r));
  } else if (r.count > 0) {
    // Zero 2 (and 3): the shard (host) += the reduced slice, at the front of g; added on the device,
    // by the kernel and in the order of the device-resident shard.
    Buffer sum = pool_.allocate(Category::grads, grad_dtype_, {r.count});
    be_.wait_copy(be_.prefetch_async(sum.view(), shards_[i].view()));
    be_.add_inplace(sum.view(), flat_slice(g, ShardRange{0, r.count}));
    out.ticket = be_.offload_async(shards_[i].view(), sum.view());
    out.temps.push_back(std::move(sum));
  }
}

void DataParallel::release_offloads(size_t keep) {
  while (offloads_.size() > keep) {
    Offloaded& oldest = offloads_.front();
    if (oldest.ticket) be_.wait_copy(oldest.ticket);
    for (size_t i : oldest.tensors) grads_.detach(i);
    offloads_.erase(offloads_.begin());
  }
}

void DataParallel::host_ready() {
  SBP_CHECK(offloads_.empty() && in_flight_.empty(),
            "DataParallel: the host reads gradients whose copies were not waited for");
  be_.synchronize();
}

void DataParallel::upload_image(const ParameterSet& weights) {
  Backend::CopyTicket last = 0;
  for (size_t i = 0; i < weights.size(); ++i)
    last = be_.prefetch_async(weights.tensor(i), image_.tensor(i));
  // Later operations on the weights wait for the copies; the host does not.
  if (last) be_.wait_copy(last);
}

void DataParallel::upload_image_slices() {
  Backend::CopyTicket last = 0;
  for (size_t i = 0; i < image_slices_.size(); ++i)
    if (sharded_weights_->range(i).count > 0)
      last = be_.prefetch_async(sharded_weights_->slice(i), image_slices_[i].view());
  if (last) be_.wait_copy(last);
}

}  // namespace sbp
