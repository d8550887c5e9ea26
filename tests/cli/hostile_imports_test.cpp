// Issue 54 item 1: imported files held to the safetensors rules. Every imported container
// accounts for every byte, every value that becomes a weight is finite, every enumerated field is
// one of its enumeration, and export refuses (naming the tensor and the value) what the target
// type cannot represent. Each class loops over a table of cases run through the real program
// (tests/cli/hostile_support.h): exit 1, one line naming the file and the tensor or field.
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>

#include "cli/hostile_support.h"
#include "support/test_support.h"

namespace sbp {
namespace {

using namespace hostile;

// ---- a small valid llama GGUF, serialised by hand (as tests/cli/hostile_input_test.cpp's
// Issue34 builder does, independently of the library's writer), with tensor data settable ----
std::string le16(uint16_t v) { return std::string(reinterpret_cast<const char*>(&v), 2); }
std::string le32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
std::string le64(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
std::string f32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return le32(u);
}
std::string gstr(const std::string& s) { return le64(s.size()) + s; }
std::string v_u32(uint32_t v) { return le32(4) + le32(v); }
std::string v_f32(float f) { return le32(6) + f32(f); }
std::string v_str(const std::string& s) { return le32(8) + gstr(s); }
std::string v_strs(const std::vector<std::string>& xs) {
  std::string r = le32(9) + le32(8) + le64(xs.size());
  for (const auto& x : xs) r += gstr(x);
  return r;
}
std::string v_i32s(const std::vector<int32_t>& xs) {
  std::string r = le32(9) + le32(5) + le64(xs.size());
  for (int32_t x : xs) r += le32(static_cast<uint32_t>(x));
  return r;
}
std::string v_f32s(const std::vector<float>& xs) {
  std::string r = le32(9) + le32(6) + le64(xs.size());
  for (float x : xs) r += f32(x);
  return r;
}

struct Gguf {
  std::optional<uint64_t> n_tensors;  // override of the count
  std::vector<std::pair<std::string, std::string>> kv;
  struct T {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type = 0;
    std::string data;  // the tensor's bytes (zeros unless a case writes some)
  };
  std::vector<T> tensors;
  std::string tail;  // bytes after the last tensor's padding

  Gguf() {
    const std::string a = "llama.";
    kv = {{"general.architecture", v_str("llama")},
          {a + "context_length", v_u32(64)},
          {a + "embedding_length", v_u32(32)},
          {a + "block_count", v_u32(1)},
          {a + "feed_forward_length", v_u32(32)},
          {a + "attention.head_count", v_u32(2)},
          {a + "attention.head_count_kv", v_u32(1)},
          {a + "attention.layer_norm_rms_epsilon", v_f32(1e-5f)},
          {a + "rope.freq_base", v_f32(10000.0f)},
          {"general.file_type", v_u32(0)},
          {"tokenizer.ggml.model", v_str("gpt2")},
          {"tokenizer.ggml.tokens", v_strs({"a", "b", "c", "d", "ab", "cd", "abcd", "<s>"})},
          {"tokenizer.ggml.token_type", v_i32s({1, 1, 1, 1, 1, 1, 1, 3})},
          {"tokenizer.ggml.merges", v_strs({"a b", "c d", "ab cd"})},
          {"tokenizer.ggml.eos_token_id", v_u32(7)}};
    auto t = [&](const std::string& n, std::vector<uint64_t> ne) {
      uint64_t numel = 1;
      for (uint64_t d : ne) numel *= d;
      tensors.push_back({n, ne, 0, std::string(4 * numel, '\0')});
    };
    t("token_embd.weight", {32, 8});
    t("blk.0.attn_norm.weight", {32});
    t("blk.0.attn_q.weight", {32, 32});
    t("blk.0.attn_k.weight", {32, 16});
    t("blk.0.attn_v.weight", {32, 16});
    t("blk.0.attn_output.weight", {32, 32});
    t("blk.0.ffn_norm.weight", {32});
    t("blk.0.ffn_gate.weight", {32, 32});
    t("blk.0.ffn_up.weight", {32, 32});
    t("blk.0.ffn_down.weight", {32, 32});
    t("output_norm.weight", {32});
    t("output.weight", {32, 8});  // untied: the last tensor
  }
  Gguf& set(const std::string& key, const std::string& value) {
    for (auto& [k, v] : kv)
      if (k == key) {
        v = value;
        return *this;
      }
    kv.emplace_back(key, value);
    return *this;
  }
  T& tensor(const std::string& name) {
    for (T& t : tensors)
      if (t.name == name) return t;
    throw std::runtime_error("no tensor " + name);
  }
  // Re-types a tensor: `block_bytes` per `block_elems` values, zero data.
  T& retype(const std::string& name, uint32_t type, uint64_t block_elems, uint64_t block_bytes) {
    T& t = tensor(name);
    uint64_t numel = 1;
    for (uint64_t d : t.ne) numel *= d;
    t.type = type;
    t.data.assign(numel / block_elems * block_bytes, '\0');
    return t;
  }
  std::string bytes() const {
    constexpr uint64_t align = 32;
    std::string b = le32(0x46554747) + le32(3) + le64(n_tensors.value_or(tensors.size())) +
                    le64(kv.size());
    for (const auto& [k, v] : kv) b += gstr(k) + v;
    uint64_t off = 0;
    for (const T& t : tensors) {
      b += gstr(t.name) + le32(static_cast<uint32_t>(t.ne.size()));
      for (uint64_t d : t.ne) b += le64(d);
      b += le32(t.type) + le64(off);
      off += (t.data.size() + align - 1) / align * align;
    }
    b.append((align - b.size() % align) % align, '\0');
    for (const T& t : tensors) {
      b += t.data;
      b.append((align - t.data.size() % align) % align, '\0');
    }
    return b + tail;
  }
};

// A GGUF case: `convert file --out dir`, which must not create dir.
struct GgufCases {
  test::TempDir& tmp;
  std::vector<Case> cases;
  int n = 0;
  void add(const std::string& name, const std::string& bytes, std::vector<std::string> says,
           const std::string& flags = "") {
    const std::string f = tmp.file("g" + std::to_string(n) + ".gguf");
    const std::string out = tmp.file("out" + std::to_string(n++));
    write_bytes(f, bytes);
    says.insert(says.begin(), fs::path(f).filename().string());
    cases.push_back({name, "convert " + f + " --out " + out + flags, says, {out}});
  }
};

// The valid base converts (every case breaks exactly one thing); returns the HF directory.
std::string convert_valid(test::TempDir& tmp) {
  const std::string f = tmp.file("valid.gguf"), out = tmp.file("valid");
  write_bytes(f, Gguf().bytes());
  const auto r = run_command(bin() + " convert " + f + " --out " + out + " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return out;
}

// A GGUF that does not account for every byte of its data region.
TEST(HostileImports, GgufByteAccounting) {
  test::TempDir tmp;
  convert_valid(tmp);
  GgufCases c{tmp, {}};
  // The reported file: output.weight's info left out of the count, so the data region starts
  // 64 bytes early, every tensor is read shifted and output.weight is dropped as "tied".
  { Gguf g; g.n_tensors = g.tensors.size() - 1;
    c.add("tensor count one too low", g.bytes(), {"tensor count 11", "belong to no tensor"}); }
  { Gguf g; g.n_tensors = g.tensors.size() - 2;
    c.add("tensor count two too low", g.bytes(), {"tensor count 10", "belong to no tensor"}); }
  { Gguf g; g.tail = std::string(32, '\0');
    c.add("32 bytes past the last tensor's padding", g.bytes(), {"belong to no tensor"}); }
  { Gguf g; g.tail = "x";
    c.add("one byte past the last tensor's padding", g.bytes(), {"belong to no tensor"}); }
  { Gguf g; g.tensors.pop_back(); g.tail = std::string(1024, '\0');
    c.add("a tensor's bytes without its info", g.bytes(), {"belong to no tensor"}); }
  for (const Case& k : c.cases) expect_clean_error(k, src());
}

// NaN and inf in tensors (F32, F16, BF16, and the block scales of Q4_0 and Q8_0).
TEST(HostileImports, GgufNonFiniteWeights) {
  test::TempDir tmp;
  convert_valid(tmp);
  GgufCases c{tmp, {}};
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  { Gguf g; g.tensor("blk.0.attn_q.weight").data.replace(4 * 37, 4, f32(nan));
    c.add("F32 nan", g.bytes(), {"blk.0.attn_q.weight", "element 37", "nan"}); }
  { Gguf g; g.tensor("output_norm.weight").data.replace(4 * 3, 4, f32(-inf));
    c.add("F32 -inf", g.bytes(), {"output_norm.weight", "element 3", "infinite"}); }
  { Gguf g; g.retype("blk.0.ffn_up.weight", 1, 1, 2).data.replace(2 * 5, 2, le16(0x7c00));
    c.add("F16 inf", g.bytes(), {"blk.0.ffn_up.weight", "element 5", "infinite"}); }
  { Gguf g; g.retype("blk.0.ffn_up.weight", 1, 1, 2).data.replace(2 * 700, 2, le16(0x7e01));
    c.add("F16 nan", g.bytes(), {"blk.0.ffn_up.weight", "element 700", "nan"}); }
  { Gguf g; g.retype("blk.0.ffn_gate.weight", 30, 1, 2).data.replace(2 * 9, 2, le16(0xff80));
    c.add("BF16 -inf", g.bytes(), {"blk.0.ffn_gate.weight", "element 9", "infinite"}); }
  // Q4_0: 18-byte blocks (f16 scale, 16 bytes of nibbles); block 3's scale inf.
  { Gguf g; g.retype("token_embd.weight", 2, 32, 18).data.replace(18 * 3, 2, le16(0x7c00));
    c.add("Q4_0 block scale inf", g.bytes(), {"token_embd.weight", "Q4_0 block 3", "infinite"}); }
  // Q8_0: 34-byte blocks; block 5's scale NaN (0 * NaN is NaN).
  { Gguf g; g.retype("blk.0.ffn_down.weight", 8, 32, 34).data.replace(34 * 5, 2, le16(0x7e00));
    c.add("Q8_0 block scale nan", g.bytes(), {"blk.0.ffn_down.weight", "Q8_0 block 5", "nan"}); }
  { Gguf g; auto& t = g.retype("output.weight", 8, 32, 34); t.data.replace(0, 2, le16(0xfc00));
    t.data[2] = 1;  // a quant of 1: -inf (a quant of 0 gives NaN)
    c.add("Q8_0 block scale -inf", g.bytes(), {"output.weight", "Q8_0 block 0", "infinite"}); }
  // A SentencePiece vocabulary's scores order its merges: NaN breaks the sort.
  { Gguf g; g.set("tokenizer.ggml.model", v_str("llama"));
    g.set("tokenizer.ggml.scores", v_f32s({0, -1, -2, nan, -4, -5, -6, 0}));
    c.add("token score nan", g.bytes(), {"tokenizer.ggml.scores", "[3]", "nan"}); }
  for (const Case& k : c.cases) expect_clean_error(k, src());
}

// Enumerated fields outside their enumeration.
TEST(HostileImports, GgufEnumerations) {
  test::TempDir tmp;
  convert_valid(tmp);
  GgufCases c{tmp, {}};
  // The reported file: token type 99 took <s>'s control status away silently.
  { Gguf g; g.set("tokenizer.ggml.token_type", v_i32s({1, 1, 1, 1, 1, 1, 1, 99}));
    c.add("token_type 99", g.bytes(), {"tokenizer.ggml.token_type", "[7]", "99"}); }
  { Gguf g; g.set("tokenizer.ggml.token_type", v_i32s({1, -1, 1, 1, 1, 1, 1, 3}));
    c.add("token_type -1", g.bytes(), {"tokenizer.ggml.token_type", "[1]", "-1"}); }
  { Gguf g; g.set("tokenizer.ggml.token_type", v_i32s({1, 1, 7, 1, 1, 1, 1, 3}));
    c.add("token_type 7", g.bytes(), {"tokenizer.ggml.token_type", "[2]", "7"}); }
  { Gguf g; g.set("general.file_type", v_u32(99));
    c.add("file_type 99", g.bytes(), {"general.file_type", "99"}); }
  { Gguf g; g.set("general.file_type", v_u32(1024 + 200));
    c.add("file_type guessed 200", g.bytes(), {"general.file_type", "1224"}); }
  { Gguf g; g.set("general.file_type", v_str("F16"));
    c.add("file_type a string", g.bytes(), {"general.file_type", "integer"}); }
  { Gguf g; g.tensor("output_norm.weight").type = 31;
    c.add("ggml type 31", g.bytes(), {"output_norm.weight", "unknown ggml type 31"}); }
  for (const Case& k : c.cases) expect_clean_error(k, src());
}

// Writes `value` at flat element `index` of F32 tensor `name` of dir/model.safetensors.
void poke_f32(const std::string& dir, const std::string& name, size_t index, float value,
              const std::string& file = "model.safetensors") {
  const std::string path = dir + "/" + file;
  Safetensors s(path);
  ASSERT_EQ(s.header[name]["dtype"], "F32") << name;
  const size_t begin = s.header[name]["data_offsets"][0].get<size_t>();
  s.data.replace(begin + 4 * index, 4, f32(value));
  write_bytes(path, s.bytes());
}

// Export refuses a value the target type cannot represent, naming the tensor and the value,
// and leaves no output behind.
TEST(HostileImports, ExportOverflow) {
  test::TempDir tmp;
  const std::string valid = convert_valid(tmp);
  auto model_with = [&](const std::string& name, const std::string& tensor, size_t i, float v) {
    const std::string d = tmp.file(name);
    fs::copy(valid, d, fs::copy_options::recursive);
    poke_f32(d, tensor, i, v);
    return d;
  };
  const std::string up = "model.layers.0.mlp.up_proj.weight";
  const std::string big = model_with("big", up, 41, 70000.0f);
  const std::string huge = model_with("huge", up, 300, 9.0e6f);
  const std::string norm = model_with("norm", "model.norm.weight", 2, 70000.0f);
  // The same 70000 fits Q8_0 (scale 70000 / 127) and BF16: those convert.
  for (const char* t : {"q8_0", "bf16", "f32"}) {
    const auto r = run_command(bin() + " convert " + big + " --to gguf --type " + t + " --out " +
                               tmp.file(std::string("ok-") + t + ".gguf") + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << t << ": " << r.output;
  }
  // A GGUF whose F32 weight is past bf16's range, converted to a bf16 directory.
  const std::string g = tmp.file("wide.gguf");
  {
    Gguf w;
    w.tensor("blk.0.attn_v.weight").data.replace(4 * 17, 4, f32(3.4e38f));
    write_bytes(g, w.bytes());
  }
  const std::vector<Case> cases = {
      {"f16 weight past 65504", "convert " + big + " --to gguf --type f16 --out " +
                                    tmp.file("o1.gguf"),
       {"big", up, "element 41", "70000", "F16"}, {tmp.file("o1.gguf")}},
      {"q8_0 block scale past f16", "convert " + huge + " --to gguf --type q8_0 --out " +
                                        tmp.file("o2.gguf"),
       {"huge", up, "element 300", "9000000", "Q8_0 block scale"}, {tmp.file("o2.gguf")}},
      {"f16 weight 9e6", "convert " + huge + " --to gguf --type f16 --out " + tmp.file("o3.gguf"),
       {"huge", up, "element 300", "9000000", "F16"}, {tmp.file("o3.gguf")}},
      // Norms stay F32 in GGUF: 70000 there converts; the case is the f32 -> bf16 direction.
      {"bf16 directory from a weight past bf16", "convert " + g + " --dtype bf16 --out " +
                                                     tmp.file("o4"),
       {"wide.gguf", "blk.0.attn_v.weight", "element 17", "3.39999995e+38", "BF16"}, {tmp.file("o4")}},
  };
  {
    const auto r = run_command(bin() + " convert " + norm + " --to gguf --type f16 --out " +
                               tmp.file("ok-norm.gguf") + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
  for (const Case& k : cases) expect_clean_error(k, src());
}

// Files a training run reads back: the optimizer state (every tensor a moment this run reads)
// and a PPO value model (every weight finite), from a real run's checkpoint, corrupted.
TEST(HostileImports, CheckpointFiles) {
  test::TempDir tmp;
  const std::string chat = src() + "/examples/tiny-chat";
  test::write_text(tmp.file("model.json"), test::kTinyChatModelJson);
  const std::string common = "model: " + tmp.file("model.json") + "\ntokenizer: " + chat +
                             "\nthreads: 1\nlayer_chunk: 64\nhead_chunk: 32\nmax_tokens: 256\n";
  test::write_text(tmp.file("sft.yaml"), common + "output_dir: " + tmp.file("sft") +
                                             "\nmax_steps: 2\ndata:\n  train: " + chat +
                                             "/train.jsonl\n");
  test::write_text(tmp.file("ppo.yaml"), common + "objective: ppo\nmax_steps: 1\n" +
                                             "data:\n  eval_fraction: 0\n  train: " + src() +
                                             "/examples/data/grpo.jsonl\n");
  auto r = run_command(bin() + " train " + tmp.file("sft.yaml") + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(bin() + " train " + tmp.file("ppo.yaml") + " output_dir=" + tmp.file("ppo") +
                  " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Saved in bf16: the checkpoint keeps the fp32 weights in master_weights.safetensors.
  r = run_command(bin() + " train " + tmp.file("sft.yaml") + " output_dir=" + tmp.file("sftb") +
                  " save_dtype=bf16 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string good = tmp.file("sft/checkpoint-2");
  const std::string good_bf16 = tmp.file("sftb/checkpoint-2");
  ASSERT_TRUE(fs::exists(good_bf16 + "/master_weights.safetensors")) << r.output;
  const std::string value = tmp.file("ppo/checkpoint-1/value_model");
  ASSERT_TRUE(fs::exists(value + "/model.safetensors")) << r.output;

  std::vector<Case> cases;
  int n = 0;
  // A checkpoint copy whose optimizer file is `st`, resumed.
  auto resume_with = [&](const std::string& name, const Safetensors& st,
                         std::vector<std::string> says) {
    const std::string ckpt = tmp.file("case" + std::to_string(n));
    const std::string out = tmp.file("resumed" + std::to_string(n++));
    fs::copy(good, ckpt, fs::copy_options::recursive);
    write_bytes(ckpt + "/optimizer.safetensors", st.bytes());
    says.insert(says.begin(), ckpt + "/optimizer.safetensors");
    cases.push_back({name, "train --resume " + ckpt + " output_dir=" + out + " max_steps=4",
                     says, {out}, true});
  };
  const Safetensors opt(good + "/optimizer.safetensors");
  {
    Safetensors st = opt;
    const std::string m = "m.model.norm.weight";
    json t = opt.header[m];
    const size_t nb = t["data_offsets"][1].get<size_t>() - t["data_offsets"][0].get<size_t>();
    t["data_offsets"] = {st.data.size(), st.data.size() + nb};
    st.data += std::string(nb, '\0');
    st.header["m.model.extra_norm.weight"] = t;
    resume_with("moment of no parameter", st, {"m.model.extra_norm.weight", "unexpected"});
  }
  {
    Safetensors st = opt;
    st.data += std::string(64, '\0');
    resume_with("bytes after the last moment", st, {"belong to no tensor"});
  }
  {  // A NaN among the master weights a bf16 checkpoint resumes from.
    const std::string ckpt = tmp.file("case" + std::to_string(n));
    const std::string out = tmp.file("resumed" + std::to_string(n++));
    fs::copy(good_bf16, ckpt, fs::copy_options::recursive);
    poke_f32(ckpt, "model.layers.0.self_attn.q_proj.weight", 7,
             std::numeric_limits<float>::quiet_NaN(), "master_weights.safetensors");
    cases.push_back({"master weight nan", "train --resume " + ckpt + " output_dir=" + out +
                         " max_steps=4",
                     {ckpt + "/master_weights.safetensors", "model.layers.0.self_attn.q_proj.weight",
                      "element 7", "nan"},
                     {out}, true});
  }
  // A PPO value model with a NaN weight (the score head) and an inf one (a trunk weight).
  auto value_with = [&](const std::string& name, const std::string& tensor, size_t i, float v,
                        const std::string& word) {
    const std::string d = tmp.file("value" + std::to_string(n));
    const std::string out = tmp.file("ppo-out" + std::to_string(n++));
    fs::copy(value, d, fs::copy_options::recursive);
    poke_f32(d, tensor, i, v);
    cases.push_back({name, "train " + tmp.file("ppo.yaml") + " output_dir=" + out +
                               " ppo.value_model=" + d,
                     {d + "/model.safetensors", "ppo.value_model", tensor,
                      "element " + std::to_string(i), word},
                     {out}, true});
  };
  {  // A value model carrying a tensor of no parameter: refused as the policy's loader does.
    const std::string d = tmp.file("value" + std::to_string(n));
    const std::string out = tmp.file("ppo-out" + std::to_string(n++));
    fs::copy(value, d, fs::copy_options::recursive);
    Safetensors st(d + "/model.safetensors");
    json t = st.header["score.weight"];
    const size_t nb = t["data_offsets"][1].get<size_t>() - t["data_offsets"][0].get<size_t>();
    t["data_offsets"] = {st.data.size(), st.data.size() + nb};
    st.data += std::string(nb, '\0');
    st.header["extra.score.weight"] = t;
    write_bytes(d + "/model.safetensors", st.bytes());
    cases.push_back({"value model extra tensor", "train " + tmp.file("ppo.yaml") +
                         " output_dir=" + out + " ppo.value_model=" + d,
                     {d + "/model.safetensors", "extra.score.weight", "unexpected tensor"},
                     {out}, true});
  }
  value_with("value head nan", "score.weight", 3, std::numeric_limits<float>::quiet_NaN(), "nan");
  value_with("value trunk inf", "model.layers.1.mlp.down_proj.weight", 100,
             std::numeric_limits<float>::infinity(), "infinite");
  for (const Case& k : cases) expect_clean_error(k, tmp.path());
}

}  // namespace
}  // namespace sbp
