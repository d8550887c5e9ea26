#include "core/batch.h"

#include "core/error.h"

namespace sbp {

void Batch::validate(int64_t vocab, const std::string& where) const {
  int64_t total = 0;
  for (size_t i = 0; i < seq_lens.size(); ++i) {
    if (seq_lens[i] < 1) throw InputError(where + ": sequence " + std::to_string(i) + " is empty");
    total += seq_lens[i];
  }
  if (total != size())
    throw InputError(where + ": sequence lengths sum to " + std::to_string(total) + " but " +
                     std::to_string(size()) + " tokens were given");
  if (size() == 0) throw InputError(where + ": no tokens");
  if (size() > (int64_t{1} << 31) - 1) throw InputError(where + ": more than 2^31 tokens");
  if (!loss_mask.empty() && static_cast<int64_t>(loss_mask.size()) != size())
    throw InputError(where + ": loss mask has " + std::to_string(loss_mask.size()) +
                     " entries for " + std::to_string(size()) + " tokens");
  for (int64_t t = 0; t < size(); ++t) {
    const int32_t id = tokens[static_cast<size_t>(t)];
    if (id < 0 || id >= vocab)
      throw InputError(where + ": token id " + std::to_string(id) + " at position " +
                       std::to_string(t) + " is outside the vocabulary (size " +
                       std::to_string(vocab) + ")");
  }
  for (float m : loss_mask)
    if (!(m >= 0.0f)) throw InputError(where + ": loss mask values must be >= 0");
}

std::vector<int32_t> Batch::targets() const {
  std::vector<int32_t> t(tokens.size(), -1);
  size_t row = 0;
  for (int64_t len : seq_lens) {
    for (int64_t i = 0; i + 1 < len; ++i) t[row + static_cast<size_t>(i)] = tokens[row + i + 1];
    row += static_cast<size_t>(len);
  }
  return t;
}

std::vector<float> Batch::target_weights() const {
  std::vector<float> w(tokens.size(), 0.0f);
  size_t row = 0;
  for (int64_t len : seq_lens) {
    for (int64_t i = 0; i + 1 < len; ++i) {
      const size_t r = row + static_cast<size_t>(i);
      w[r] = loss_mask.empty() ? 1.0f : loss_mask[r + 1];
    }
    row += static_cast<size_t>(len);
  }
  return w;
}

std::vector<int32_t> Batch::positions() const {
  std::vector<int32_t> p(tokens.size());
  size_t row = 0;
  for (int64_t len : seq_lens) {
    for (int64_t i = 0; i < len; ++i) p[row + static_cast<size_t>(i)] = static_cast<int32_t>(i);
    row += static_cast<size_t>(len);
  }
  return p;
}

std::vector<int32_t> Batch::segment_starts() const {
  std::vector<int32_t> s(tokens.size());
  size_t row = 0;
  for (int64_t len : seq_lens) {
    for (int64_t i = 0; i < len; ++i) s[row + static_cast<size_t>(i)] = static_cast<int32_t>(row);
    row += static_cast<size_t>(len);
  }
  return s;
}

double Batch::loss_weight_sum() const {
  // target_weights() summed in row order, without its (T) table.
  double s = 0.0;
  size_t row = 0;
  for (int64_t len : seq_lens) {
    for (int64_t i = 0; i + 1 < len; ++i)
      s += loss_mask.empty() ? 1.0f : loss_mask[row + static_cast<size_t>(i) + 1];
    row += static_cast<size_t>(len);
  }
  return s;
}

void Batch::append(const Batch& o) {
  const bool need_mask = !loss_mask.empty() || !o.loss_mask.empty();
  if (need_mask && loss_mask.empty()) loss_mask.assign(tokens.size(), 1.0f);
  tokens.insert(tokens.end(), o.tokens.begin(), o.tokens.end());
  seq_lens.insert(seq_lens.end(), o.seq_lens.begin(), o.seq_lens.end());
  if (need_mask) {
    if (o.loss_mask.empty())
      loss_mask.insert(loss_mask.end(), o.tokens.size(), 1.0f);
    else
      loss_mask.insert(loss_mask.end(), o.loss_mask.begin(), o.loss_mask.end());
  }
}

}  // namespace sbp
