#pragma once
// Execution modes (DESIGN §3): two orthogonal knobs and three presets.
//   layers: store (keep every activation) | recompute (gradient checkpointing per layer)
//           | stream (StreamBP: chunk loop, last chunk first, K/V once per layer)
//   head:   full (materialise the (T, V) logits) | chunked (one (c, V) block at a time)
//   presets: base = store+full, checkpoint = recompute+full, stream = stream+chunked
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace sbp {

enum class LayerMode { store, recompute, stream };
enum class HeadMode { full, chunked };

// What grows with T and may wait in host memory (Backend::host_memory) while the step does not
// need it (DESIGN §4 "Offload"). The engine then needs a host pool (Pool::set_host).
struct Offload {
  // Every layer's input checkpoint but the last layer's: copied to the host as soon as the next
  // layer has run, prefetched back one layer ahead of its backward. At most two layers'
  // checkpoints are on the device at once, in every layer mode.
  bool checkpoints = false;
  // The residual-stream gradient gy (T, d) F32 of the backward (engine/residual_grad.h): in
  // host memory, one chunk of rows on the device at a time.
  bool residual_grad = false;
  // The trained models' optimizer (dist/data_parallel.h "offload: optimizer"): fp32 master
  // weights, AdamW moments and the gradient accumulators in host memory, the update on the
  // CPU; each layer's gradient leaves the device when the layer's backward completes. Not the
  // engine's: the models' owner (step/model_set.h) acts on it.
  bool optimizer = false;
  bool any() const { return checkpoints || residual_grad || optimizer; }
  // What the engine itself parks in host memory.
  bool activations() const { return checkpoints || residual_grad; }
};
// "none" or a list of "checkpoints", "residual_grad" and "optimizer" joined by ',' or '+'
// (bench and gradcheck take a comma list of settings, so one setting of two items is written
// with '+'). Throws InputError naming the item otherwise.
Offload parse_offload(const std::string& list);
// "none", or the items in the order above joined by '+' ("checkpoints+optimizer").
std::string offload_name(const Offload& o);

struct ExecConfig {
  LayerMode layers = LayerMode::stream;
  HeadMode head = HeadMode::chunked;
  int64_t layer_chunk = 1024;    // tokens per chunk in stream mode (any size >= 1)
  int64_t head_chunk = 512;      // rows per LM-head block in chunked mode
  DType act_dtype = DType::F32;  // storage of activations, checkpoints and K/V
  Offload offload;               // what waits in host memory (none by default)

  // Effective sizes for a batch of T tokens.
  int64_t layer_chunk_for(int64_t T) const;
  int64_t head_chunk_for(int64_t T) const;
};

// "base", "checkpoint", "stream", or "<store|recompute|stream>+<full|chunked>".
// Chunk sizes are left at their defaults. Throws InputError for anything else.
ExecConfig parse_mode(const std::string& s);
std::vector<ExecConfig> parse_modes(const std::string& comma_list);
// The preset name when the knobs match one, else "layers+head".
std::string mode_name(const ExecConfig& e);

}  // namespace sbp
