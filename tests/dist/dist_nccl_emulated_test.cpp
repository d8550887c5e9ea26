// The NCCL communicator (src/dist/nccl_communicator.cpp) on the CPU: in the emulation build
// (STREAMBP_CUDA_EMULATION with MPI) NCCL is emulated over MPI (src/backend/cuda/emulation/
// nccl.h), so `mpirun -np 2 streambp train backend=cuda` runs the communicator's own code
// (unique id through the host communicator, all-reduce for zero 0, reduce-scatter and the
// grouped broadcasts of the weight all-gather for zero 2, events and streams) on two emulated
// GPUs. A reduced form of dist_equivalence_test: SFT, 2 steps (one with an odd number of
// micro-batches), zero 0, 2 and 3 (weights gathered per layer over NCCL, the same bytes as 2):
//  - against one process on the emulated CUDA backend with the same global batch, and against
//    the same two-rank run on the CPU backend with the MPI communicator: weights within the
//    bound the exactness contract gives two summation orders of the same gradients
//    (dist_support.h, trained_weights_bound; Adam's eps 1e-3 as in dist_equivalence_test.cpp);
//    losses and gradient norms within 1e-6.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "dist/dist_support.h"

namespace sbp {
namespace {

#if defined(STREAMBP_CUDA_EMULATION) && defined(STREAMBP_HAVE_NCCL)

using dist_test::TrainDir;
using nlohmann::json;

TEST(DistNcclEmulated, TwoCudaRanksOverNcclEqualTwoCpuRanksOverMpi) {
  SKIP_WITHOUT_MPIRUN();
  const std::string yaml = "objective: sft\ndata:\n  train: " + test::source_dir() +
                           "/examples/data/sft_messages.jsonl\nmax_tokens: 160\n"
                           "layer_chunk: 16\nhead_chunk: 32\nmax_steps: 2\ngrad_accum: 2\n"
                           "optim:\n  lr: 0.0001\n  eps: 1e-3\n  weight_decay: 0.1\n";
  TrainDir run(yaml);
  auto r = run.train(2, "cpu", "backend=cpu dist.zero=0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<json> want = dist_test::read_metrics(run.out("cpu/metrics.jsonl"));
  ASSERT_EQ(want.size(), 2u);
  r = run.train(0, "one_cpu", "backend=cpu grad_accum=4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run.train(0, "one_cuda", "backend=cuda grad_accum=4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto weights = [&](const std::string& name) {
    return run.out(name + "/checkpoint-2/model.safetensors");
  };
  const double backends = dist_test::worst_rel_err(weights("one_cuda"), weights("one_cpu"));
  std::printf("[nccl emulated] one process, cuda vs cpu: worst max|a-b|/max|b| %.2e\n", backends);
  for (int zero : {0, 2, 3}) {
    const std::string name = "nccl" + std::to_string(zero);
    // Rank r takes emulated GPU r (trainer.cpp); the runtime's report counts the collectives.
    r = test::run_command("STREAMBP_CUDA_EMULATION_DEVICES=2 STREAMBP_CUDA_EMULATION_REPORT=1 " +
                          dist_test::mpirun(2, run.dir.path()) + test::streambp_binary() +
                          " train " + run.config + " output_dir=" + run.out(name) +
                          " backend=cuda dist.zero=" + std::to_string(zero));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("data parallel: 2 ranks, zero " + std::to_string(zero)),
              std::string::npos)
        << r.output;
    // Both ranks ran NCCL collectives (none would mean the host communicator did the work).
    size_t ranks_with_collectives = 0;
    for (size_t at = r.output.find(" NCCL collective runs"); at != std::string::npos;
         at = r.output.find(" NCCL collective runs", at + 1)) {
      const size_t start = r.output.rfind(' ', at - 1);
      if (std::stoll(r.output.substr(start + 1, at - start - 1)) > 0) ++ranks_with_collectives;
    }
    EXPECT_EQ(ranks_with_collectives, 2u) << r.output;
    const double same_backend = dist_test::worst_rel_err(weights(name), weights("one_cuda"));
    const double vs_mpi = dist_test::worst_rel_err(weights(name), weights("cpu"));
    std::printf(
        "[nccl emulated] zero %d: worst max|a-b|/max|b| against one cuda process %.2e, "
        "against two cpu ranks over MPI %.2e\n",
        zero, same_backend, vs_mpi);
    dist_test::expect_trained_weights_close(weights(name), weights("one_cuda"), {want}, name);
    dist_test::expect_trained_weights_close(weights(name), weights("cpu"), {want}, name);
    const std::vector<json> got = dist_test::read_metrics(run.out(name + "/metrics.jsonl"));
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t i = 0; i < got.size(); ++i) {
      for (const char* key : {"micro_batches", "tokens", "loss_tokens"})
        EXPECT_EQ(got[i][key], want[i][key]) << key;
      for (const char* key : {"loss", "grad_norm"}) {
        const double a = got[i][key].get<double>(), b = want[i][key].get<double>();
        EXPECT_LE(std::fabs(a - b), 1e-6 * std::max(1.0, std::fabs(b)))
            << name << " step " << i + 1 << ": " << key;
      }
      EXPECT_EQ(got[i]["dist/ranks"], 2);
      EXPECT_EQ(got[i]["dist/zero"], zero);
    }
    // ZeRO-3 gathers each layer's weights over NCCL before it runs: the bits ZeRO-2 holds whole,
    // so the same sums and the same bytes.
    if (zero == 3) EXPECT_TRUE(dist_test::same_bytes(weights(name), weights("nccl2")));
  }
}

// LoRA over NCCL (dist/lora_grads.cpp: one collective per adapter tensor, in GPU memory): DPO,
// 2 steps, the second with one pair for two ranks (an empty slot), against one emulated CUDA
// process with the same global batch; adapters within the trained_weights_bound. The
// adapters start two SFT steps from PEFT's B = 0 (dist_lora_online_test.cpp says why).
TEST(DistNcclEmulated, LoraAdaptersOverNcclEqualOneCudaProcess) {
  SKIP_WITHOUT_MPIRUN();
  const std::string lora =
      "lora:\n  r: 4\n  alpha: 8\n  target_modules: [q_proj, v_proj, down_proj]\n"
      "layer_chunk: 16\nhead_chunk: 32\n";
  TrainDir start("objective: sft\ndata:\n  train: " + test::source_dir() +
                 "/examples/data/sft_messages.jsonl\nmax_tokens: 160\nmax_steps: 2\n"
                 "optim:\n  lr: 0.05\n" +
                 lora);
  auto r = start.train(0, "start", "backend=cpu");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  TrainDir run("objective: dpo\ndata:\n  train: " + test::source_dir() +
               "/examples/data/dpo.jsonl\nmax_tokens: 256\nmax_steps: 2\n"
               "optim:\n  lr: 0.0001\n  eps: 1e-3\n  weight_decay: 0.1\nlora:\n  adapter: " +
               start.out("start/checkpoint-2") + "\nlayer_chunk: 16\nhead_chunk: 32\n");
  r = run.train(0, "one", "backend=cuda grad_accum=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_command("STREAMBP_CUDA_EMULATION_DEVICES=2 STREAMBP_CUDA_EMULATION_REPORT=1 " +
                        dist_test::mpirun(2, run.dir.path()) + test::streambp_binary() + " train " +
                        run.config + " output_dir=" + run.out("two") +
                        " backend=cuda grad_accum=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // 12 adapter tensors (2 layers x 3 projections x A, B) per step, 2 steps, on each rank.
  size_t ranks_24 = 0;
  for (size_t at = r.output.find(" 24 NCCL collective runs"); at != std::string::npos;
       at = r.output.find(" 24 NCCL collective runs", at + 1))
    ++ranks_24;
  EXPECT_EQ(ranks_24, 2u) << r.output;
  const std::vector<json> a = dist_test::read_metrics(run.out("one/metrics.jsonl"));
  const double w = dist_test::expect_trained_weights_close(
      run.out("two/checkpoint-2/adapter_model.safetensors"),
      run.out("one/checkpoint-2/adapter_model.safetensors"), {a}, "lora");
  std::printf("[nccl emulated] lora: worst max|a-b| / bound over the adapters %.2e\n", w);
  const std::vector<json> b = dist_test::read_metrics(run.out("two/metrics.jsonl"));
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t i = 0; i < a.size(); ++i)
    for (const char* key : {"loss", "grad_norm"})
      EXPECT_LE(std::fabs(b[i][key].get<double>() - a[i][key].get<double>()),
                1e-6 * std::max(1.0, std::fabs(a[i][key].get<double>())))
          << "step " << i + 1 << ": " << key;
}

// Context parallelism on two emulated GPUs: K/V rows broadcast and dK/dV rows reduced by NCCL
// over the context group (src/engine/context_rows.cpp on device memory), the gradients by
// NCCL over the world; the same weights as one emulated CUDA process.
TEST(DistNcclEmulated, ContextParallelOverNcclEqualsOneCudaProcess) {
  SKIP_WITHOUT_MPIRUN();
  TrainDir run("objective: sft\ndata:\n  train: " + test::source_dir() +
               "/examples/data/sft_messages.jsonl\nmax_tokens: 160\nmax_steps: 2\n"
               "optim:\n  lr: 0.0001\n  eps: 1e-3\n  weight_decay: 0.1\n"
               "layer_chunk: 16\nhead_chunk: 32\n");
  auto r = run.train(0, "one", "backend=cuda grad_accum=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_command("STREAMBP_CUDA_EMULATION_DEVICES=2 STREAMBP_CUDA_EMULATION_REPORT=1 " +
                        dist_test::mpirun(2, run.dir.path()) + test::streambp_binary() + " train " +
                        run.config + " output_dir=" + run.out("two") +
                        " backend=cuda grad_accum=2 dist.context_parallel=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("context parallel: groups of 2 ranks"), std::string::npos) << r.output;
  const double w = dist_test::expect_trained_weights_close(
      run.out("two/checkpoint-2/model.safetensors"), run.out("one/checkpoint-2/model.safetensors"),
      {dist_test::read_metrics(run.out("one/metrics.jsonl"))}, "cp 2");
  std::printf("[nccl emulated] cp 2: worst max|a-b| / bound over the weights %.2e\n", w);
  dist_test::expect_same_metrics(run.out("two/metrics.jsonl"), run.out("one/metrics.jsonl"),
                                 "cp 2 over NCCL", 2);
}

#else

TEST(DistNcclEmulated, NeedsTheEmulationBuildWithMpi) {
  GTEST_SKIP() << "NCCL is emulated only in the CUDA emulation build with MPI (build-emu)";
}

#endif

}  // namespace
}  // namespace sbp
