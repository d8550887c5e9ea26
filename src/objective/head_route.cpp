#include "objective/head_route.h"

#include <algorithm>
#include <utility>

namespace sbp {

namespace {

HostChunks on_host(HostChunks route) { return route; }

HostChunks on_host(ConstantGrads route) {
  HostChunks h;
  h.grads = [route = std::move(route)](const TokenChunk& in, const TokenChunkGrads& out) {
    route.grads(in.row_begin, out.dlogp);
    route.add_logp(in.row_begin, in.logp);
    std::fill(out.dentropy.begin(), out.dentropy.end(), 0.0f);
  };
  return h;
}

HostChunks on_host(PolicyFormula route) {
  HostChunks h;
  h.entropy = route.entropy;
  h.grads = [route = std::move(route)](const TokenChunk& in, const TokenChunkGrads& out) {
    const size_t n = in.logp.size();
    std::vector<float> rows(n * kPolicyRowWidth);  // (n, 4)
    route.rows(in.row_begin, rows);
    for (size_t i = 0; i < n; ++i) {
      const PolicyGrad g = policy_token_grad(in.logp[i], &rows[i * kPolicyRowWidth], route.terms);
      out.dlogp[i] = g.dlogp;
      if (!out.dentropy.empty()) out.dentropy[i] = g.dentropy;
    }
    route.add_values(in);
  };
  return h;
}

HostChunks on_host(ValueFormula route) {
  HostChunks h;
  h.grads = [route = std::move(route)](const TokenChunk& in, const TokenChunkGrads& out) {
    const size_t n = in.value.size();
    std::vector<float> rows(n * kValueRowWidth);  // (n, 3)
    route.rows(in.row_begin, rows);
    for (size_t i = 0; i < n; ++i)
      out.dvalue[i] = value_token_grad(in.value[i], &rows[i * kValueRowWidth], route.terms);
    route.add_values(in);
  };
  return h;
}

HostChunks on_host(SequenceRoute route) {
  HostChunks h;
  h.prepasses = 1;
  h.prepass = [add = route.add_prepass](int, const TokenChunk& rows) { add(rows); };
  h.finish_prepass = [finish = route.finish](int) { finish(); };
  h.constant = route.host_grads;
  h.grads = [grads = route.host_grads](const TokenChunk& in, const TokenChunkGrads& out) {
    grads(in.row_begin, out.dlogp);
    std::fill(out.dentropy.begin(), out.dentropy.end(), 0.0f);
  };
  return h;
}

}  // namespace

HostChunks host_chunks(HeadRoute route) {
  return std::visit([](auto&& r) { return on_host(std::move(r)); }, std::move(route));
}

}  // namespace sbp
