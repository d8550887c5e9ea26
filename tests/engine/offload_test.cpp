// Host offload of the layer-input checkpoints (ExecConfig::offload, Backend::offload_async /
// prefetch_async) changes where bytes wait, never what is computed: for every objective, every
// layer mode (chunk sizes that do and do not divide T), fp32, bf16 and LoRA, a step with offload
// gives the loss and every gradient of the same step without it, bit for bit. Each step runs
// through the step runner `train` runs, so the reference and value models' passes offload too.
//
// On the checking backend (STREAMBP_CHECK_MEMORY=1, the suite's second pass) a copy runs only
// when it is waited for, and the host space is out of reach: an engine that read a checkpoint
// before its prefetch was waited for, or touched offloaded bytes on the host, would fail here.
// The protocol's own refusals (a use, a release, a second copy of a tensor in flight) are
// checked directly at the end.
#include <gtest/gtest.h>

#include <cstring>

#include "check/gradcheck.h"
#include "check/random_batches.h"
#include "model/parameters.h"
#include "support/test_support.h"

namespace sbp {
namespace {

struct Models {
  ParameterSet weights, reference, value;
  LoraSet lora;
};

// What is offloaded: the checkpoints, the residual-stream gradient, or both.
const Offload kOffloads[] = {
    {.checkpoints = true}, {.residual_grad = true}, {.checkpoints = true, .residual_grad = true}};

ExecConfig offloaded(ExecConfig e, const Offload& o) {
  e.offload = o;
  return e;
}

// Every layer mode; `all` adds the chunkings that cover the rest of the engine's loops (the
// bf16 and LoRA runs take the three that differ in where checkpoints live and when).
std::vector<ExecConfig> modes(int64_t T, bool all) {
  std::vector<ExecConfig> out = {parse_mode("base"), parse_mode("checkpoint"), parse_mode("stream"),
                                 parse_mode("recompute+chunked")};
  ExecConfig odd = parse_mode("stream");  // chunks that do not divide T
  odd.layer_chunk = 7;
  odd.head_chunk = 5;
  out.push_back(odd);
  if (!all) return {out[0], out[1], odd};
  ExecConfig one = parse_mode("stream+full");
  one.layer_chunk = T;
  out.push_back(one);
  return out;
}

// Runs each mode with and without offload and asks for the same bits.
void expect_offload_changes_nothing(ObjectiveKind kind, Precision precision, bool lora) {
  const ModelConfig cfg = preset_config(kind == ObjectiveKind::dpo ? "tiny-qwen2" : "tiny-qwen3");
  const std::unique_ptr<Backend> be = test::backend();
  Ledger ledger;
  Pool pool(ledger, *be);
  const DType dt = precision == Precision::bf16 ? DType::BF16 : DType::F32;
  Models m;
  m.weights = ParameterSet(cfg, pool, Category::weights, dt, false);
  init_parameters(m.weights, 7, InitStyle::test, 0.2f);
  cli::GradcheckOptions opts;
  opts.objective.kind = kind;
  opts.group_size = 3;
  opts.precision = precision;
  opts.seed = 5;
  const ObjectiveSetup& setup = opts.objective;
  if (lora) {
    opts.lora = LoraConfig{.r = 2};
    m.lora = LoraSet(cfg, opts.lora, pool, Category::weights, DType::F32, false);
    init_lora(m.lora, 9, 0.05f);
  }
  if (setup.needs_reference() && !lora) {
    m.reference = ParameterSet(cfg, pool, Category::weights, dt, false);
    init_parameters(m.reference, 8, InitStyle::test, 0.2f);
  }
  if (setup.needs_value_model()) {
    m.value = ParameterSet(cfg, pool, Category::weights, dt, false, ModelHead::value);
    init_parameters(m.value, 10, InitStyle::test, 0.2f);
  }
  const ParameterSet* ref = m.reference.size() ? &m.reference : nullptr;
  const ParameterSet* value = m.value.size() ? &m.value : nullptr;
  const LoraSet* lora_p = lora ? &m.lora : nullptr;
  const int64_t T = 36;
  const Batch batch = cli::random_objective_batch(kind, opts.group_size, cfg.vocab_size, T, 4, 3);
  const MicroBatch mb = cli::gradcheck_micro_batch(*be, cfg, m.weights, value, batch, opts, lora_p);
  for (ExecConfig exec : modes(T, precision == Precision::fp32 && !lora)) {
    exec.act_dtype = dt;
    const std::string what = std::string(objective_name(kind)) + " " + mode_name(exec) +
                             " lc=" + std::to_string(exec.layer_chunk_for(T)) +
                             (lora ? " lora" : "") + (dt == DType::BF16 ? " bf16" : "");
    const cli::ModeGrads plain =
        cli::gradcheck_step(*be, cfg, m.weights, ref, value, mb, exec, opts, lora_p);
    EXPECT_EQ(plain.host_peak_bytes, 0) << what;
    for (const Offload& o : kOffloads) {
      const std::string what_o = what + " offload " + offload_name(o);
      const cli::ModeGrads off = cli::gradcheck_step(*be, cfg, m.weights, ref, value, mb,
                                                     offloaded(exec, o), opts, lora_p);
      // Every layer's input but the last waited on the host (L - 1 checkpoints of (T, d)), and
      // beside them, from the head on, the (T, d) F32 residual-stream gradient.
      EXPECT_EQ(
          off.host_peak_bytes,
          (o.checkpoints ? (cfg.num_hidden_layers - 1) * T * cfg.hidden_size * dtype_size(dt) : 0) +
              (o.residual_grad ? T * cfg.hidden_size * 4 : 0))
          << what_o;
      EXPECT_EQ(std::memcmp(&plain.result.loss, &off.result.loss, sizeof(double)), 0)
          << what_o << ": loss " << plain.result.loss << " vs " << off.result.loss;
      ASSERT_EQ(plain.grads.size(), off.grads.size());
      for (size_t i = 0; i < plain.grads.size(); ++i) {
        ASSERT_EQ(plain.grads[i].size(), off.grads[i].size());
        EXPECT_EQ(std::memcmp(plain.grads[i].data(), off.grads[i].data(),
                              plain.grads[i].size() * sizeof(float)),
                  0)
            << what_o << ": gradient tensor " << i << " differs";
      }
      EXPECT_EQ(be->copies_in_flight(), 0) << what_o;
    }
  }
}

class OffloadIsExact : public ::testing::TestWithParam<ObjectiveKind> {};

TEST_P(OffloadIsExact, Fp32) { expect_offload_changes_nothing(GetParam(), Precision::fp32, false); }
TEST_P(OffloadIsExact, Bf16) { expect_offload_changes_nothing(GetParam(), Precision::bf16, false); }
TEST_P(OffloadIsExact, Lora) { expect_offload_changes_nothing(GetParam(), Precision::fp32, true); }

INSTANTIATE_TEST_SUITE_P(EveryObjective, OffloadIsExact, ::testing::ValuesIn([] {
                           std::vector<ObjectiveKind> kinds;
                           for (const auto& n : objective_names()) kinds.push_back(n.value);
                           return kinds;
                         }()),
                         [](const ::testing::TestParamInfo<ObjectiveKind>& i) {
                           return std::string(objective_name(i.param));
                         });

// The copy protocol's refusals: a tensor in flight may not be used, copied again or released
// before wait_copy; after the wait it is the caller's again and holds the copied bytes.
TEST(OffloadProtocol, InFlightTensorsAreRefusedUntilWaitedFor) {
  const std::unique_ptr<Backend> be = test::backend();
  Ledger ledger, host_ledger;
  Pool pool(ledger, *be), host(host_ledger, be->host_memory());
  Buffer x = pool.allocate(Category::checkpoints, DType::F32, {3, 4});
  Buffer y = pool.allocate(Category::checkpoints, DType::F32, {3, 4});
  Buffer h = host.allocate(Category::checkpoints, DType::F32, {3, 4});
  const std::vector<float> values = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  upload_f32(x.view(), values);
  const Backend::CopyTicket out = be->offload_async(h.view(), x.view());
  EXPECT_EQ(be->copies_in_flight(), 1);
  EXPECT_THROW(be->scale_inplace(x.view(), 2.0f), ShapeError);  // its source is in flight
  EXPECT_THROW(download_f32(x.view()), ShapeError);
  EXPECT_THROW(be->offload_async(h.view(), y.view()), ShapeError);  // its target is in flight
  EXPECT_THROW(be->scale_inplace(h.view(), 2.0f), Error);           // host memory: no op takes it
  be->wait_copy(out);
  EXPECT_EQ(be->copies_in_flight(), 0);
  be->fill(x.view(), 0.0f);
  const Backend::CopyTicket in = be->prefetch_async(y.view(), h.view());
  EXPECT_THROW(be->add_inplace(x.view(), y.view()), ShapeError);  // not arrived yet
  be->wait_copy(in);
  EXPECT_EQ(download_f32(y.view()), values);
  EXPECT_EQ(be->offloaded_bytes(), 48);
  EXPECT_EQ(be->prefetched_bytes(), 48);
  EXPECT_THROW(be->wait_copy(99), ShapeError);                      // never issued
  EXPECT_THROW(be->offload_async(x.view(), h.view()), ShapeError);  // the spaces swapped
}

// A release of a tensor whose copy was not waited for stops the program (its bytes would be
// reused under the copy), except while an exception abandons the step: then the copies finish.
void release_in_flight() {
  const std::unique_ptr<Backend> be = test::backend();
  Ledger ledger, host_ledger;
  Pool pool(ledger, *be), host(host_ledger, be->host_memory());
  Buffer h = host.allocate(Category::checkpoints, DType::F32, {2, 2});
  Buffer x = pool.allocate(Category::checkpoints, DType::F32, {2, 2});
  be->offload_async(h.view(), x.view());
  x.reset();
}

TEST(OffloadProtocol, ReleaseInFlightAborts) {
  EXPECT_DEATH(release_in_flight(), "released while");
}

TEST(OffloadProtocol, UnwindingLetsCopiesFinish) {
  const std::unique_ptr<Backend> be = test::backend();
  Ledger ledger, host_ledger;
  Pool pool(ledger, *be), host(host_ledger, be->host_memory());
  Buffer h = host.allocate(Category::checkpoints, DType::F32, {2, 2});
  EXPECT_THROW(
      {
        Buffer x = pool.allocate(Category::checkpoints, DType::F32, {2, 2});
        be->offload_async(h.view(), x.view());
        throw InputError("the step failed");
      },
      InputError);
  EXPECT_EQ(be->copies_in_flight(), 0);
}

}  // namespace
}  // namespace sbp
