// The rank-agreement check without MPI: the canonical list of what ranks must share
// (train/rank_settings.h), its encoding, and the first difference every rank names
// (dist/rank_agreement.h). The exchange itself under mpirun: dist_agreement_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "dist/rank_agreement.h"
#include "support/test_support.h"
#include "train/rank_settings.h"
#include "train/train_config.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;
using List = std::vector<AgreedSetting>;

TEST(RankAgreement, EncodingRoundTripsAnyBytesAndRefusesMalformedText) {
  const List s = {{"a", "1"}, {"", ""}, {"k:2", std::string("x\0y\n:", 5)}, {"b", "12:34"}};
  const List back = decode_settings(encode_settings(s));
  ASSERT_EQ(back.size(), s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_EQ(back[i].key, s[i].key);
    EXPECT_EQ(back[i].value, s[i].value);
  }
  EXPECT_TRUE(decode_settings("").empty());
  for (const char* bad : {"1:a", "2:a", "x:a1:b", "1:a9:b", ":a0:", "99999999999999999999:a"})
    EXPECT_THROW(decode_settings(bad), Error) << bad;
}

TEST(RankAgreement, TheDigestSeesEveryKeyValueAndBoundary) {
  const List base = {{"ab", "c"}, {"d", "e"}};
  const uint64_t d = settings_digest(base);
  EXPECT_EQ(settings_digest(List{{"ab", "c"}, {"d", "e"}}), d);
  for (const List& other : {List{{"a", "bc"}, {"d", "e"}}, List{{"ab", "c"}, {"d", "f"}},
                            List{{"d", "e"}, {"ab", "c"}}, List{{"ab", "c"}}, List{}})
    EXPECT_NE(settings_digest(other), d);
}

TEST(RankAgreement, TheFirstDifferenceInListOrderIsNamedWithBothValues) {
  const List zero = {{"grad_accum", "1"}, {"optim.lr", "0.0001"}, {"seed", "42"}};
  EXPECT_EQ(first_disagreement({zero}), std::nullopt);
  EXPECT_EQ(first_disagreement({zero, zero, zero}), std::nullopt);
  List one = zero;
  one[1].value = "0.001";
  one[2].value = "7";
  EXPECT_EQ(first_disagreement({zero, one}),
            "ranks disagree on optim.lr (rank 0: 0.0001, rank 1: 0.001)");
  // The lowest rank that differs at the first position any rank does.
  List two = zero;
  two[0].value = "2";
  EXPECT_EQ(first_disagreement({zero, one, two}),
            "ranks disagree on grad_accum (rank 0: 1, rank 2: 2)");
  EXPECT_EQ(first_disagreement({zero, zero, one}),
            "ranks disagree on optim.lr (rank 0: 0.0001, rank 2: 0.001)");
}

TEST(RankAgreement, AMissingOrExtraKeyIsNamedAndLongOrOddValuesShownAsDigests) {
  const List zero = {{"model", "directory"}, {"model/a.json", "1"}, {"model/c.json", "3"}};
  // Rank 1 has one more file in the directory, sorting between the two.
  const List extra = {
      {"model", "directory"}, {"model/a.json", "1"}, {"model/b.json", "2"}, {"model/c.json", "3"}};
  EXPECT_EQ(first_disagreement({zero, extra}),
            "ranks disagree on model/b.json (rank 0: (none), rank 1: 2)");
  EXPECT_EQ(first_disagreement({extra, zero}),
            "ranks disagree on model/b.json (rank 0: 2, rank 1: (none))");
  // A shorter list.
  EXPECT_EQ(first_disagreement({zero, List(zero.begin(), zero.begin() + 2)}),
            "ranks disagree on model/c.json (rank 0: 3, rank 1: (none))");
  // A value too long for one line, or with a newline, is its digest; an empty one is "".
  const std::string long_value(200, 'x');
  const std::string msg = *first_disagreement({List{{"k", long_value}}, List{{"k", "a\nb"}}});
  EXPECT_EQ(msg, "ranks disagree on k (rank 0: digest " +
                     hex_digest(fnv1a64(long_value.data(), long_value.size())) +
                     ", rank 1: digest " + hex_digest(fnv1a64("a\nb", 3)) + ")");
  EXPECT_EQ(first_disagreement({List{{"k", ""}}, List{{"k", "v"}}}),
            "ranks disagree on k (rank 0: \"\", rank 1: v)");
}

TEST(RankAgreement, OneProcessAgreesWithItself) {
  EXPECT_NO_THROW(check_ranks_agree(single_process(), List{{"k", "v"}}));
  // A stand-in of 2 ranks (each gets its own list back): the same list on every rank.
  ShapeOnlyCommunicator two(0, 2);
  EXPECT_NO_THROW(check_ranks_agree(two, List{{"k", "v"}}));
}

const AgreedSetting* find(const List& s, const std::string& key) {
  for (const AgreedSetting& e : s)
    if (e.key == key) return &e;
  return nullptr;
}

// The first key whose entry differs between two lists ("" if none).
std::string first_key(const List& a, const List& b) {
  const std::optional<std::string> m = first_disagreement({a, b});
  if (!m) return "";
  const std::string p = "ranks disagree on ";
  return m->substr(p.size(), m->find(" (rank 0") - p.size());
}

struct Inputs {
  test::TempDir dir;
  std::string data, config;
  Inputs() {
    data = dir.file("train.jsonl");
    test::write_text(data, R"({"text": "hello"})"
                           "\n");
    test::write_text(dir.file("model.json"), test::kTinyChatModelJson);
    config = dir.file("config.yaml");
    test::write_text(config, "model: " + dir.file("model.json") +
                                 "\ntokenizer: " + test::source_dir() +
                                 "/examples/tiny-chat\ndata:\n  train: " + data + "\n");
  }
  List list(const std::vector<std::string>& overrides = {}, const std::string& resume = "") {
    return settings_ranks_must_share(load_train_config(config, overrides), resume);
  }
};

TEST(RankSettings, EveryKeyButThreadsAndInputsByContentNotPath) {
  Inputs in;
  const List base = in.list();
  EXPECT_EQ(first_key(base, in.list()), "");
  // The keys of the issue's cases are all there, with their values.
  for (const auto& [key, value] :
       {std::pair{"optim.lr", "1e-05"}, std::pair{"seed", "42"}, std::pair{"dist.zero", "0"},
        std::pair{"precision", "fp32"}, std::pair{"grad_accum", "1"},
        std::pair{"max_tokens", "4096"}, std::pair{"max_steps", "0"}}) {
    ASSERT_NE(find(base, key), nullptr) << key;
    EXPECT_EQ(find(base, key)->value, value) << key;
  }
  EXPECT_EQ(find(base, "threads"), nullptr);
  EXPECT_EQ(first_key(base, in.list({"threads=3"})), "");
  for (const char* kv :
       {"optim.lr=1e-3", "seed=1", "dist.zero=1", "precision=bf16", "grad_accum=2", "max_tokens=64",
        "max_steps=5", "lora.r=4", "layer_chunk=7", "head_chunk=3", "objective=dpo"}) {
    const std::string key = std::string(kv).substr(0, std::string(kv).find('='));
    EXPECT_EQ(first_key(base, in.list({kv})), key) << kv;
  }
  // A derived default is named by its source: output_dir, not metrics (and max_tokens above,
  // not data.max_seq_len).
  EXPECT_EQ(first_key(base, in.list({"output_dir=" + in.dir.file("o2")})), "output_dir");
  // The data: another path to the same bytes agrees; one changed byte does not.
  const std::string copy = in.dir.file("copy.jsonl");
  fs::copy_file(in.data, copy);
  EXPECT_EQ(first_key(base, in.list({"data.train=" + copy})), "");
  test::write_text(copy, R"({"text": "hellp"})"
                         "\n");
  EXPECT_EQ(first_key(base, in.list({"data.train=" + copy})), "data.train");
  // The model: a config file by content.
  std::string deeper = test::kTinyChatModelJson;
  deeper.replace(deeper.find("\"num_hidden_layers\": 2"), 22, "\"num_hidden_layers\": 3");
  test::write_text(in.dir.file("deeper.json"), deeper);
  EXPECT_EQ(first_key(base, in.list({"model=" + in.dir.file("deeper.json")})), "model");
  EXPECT_EQ(first_key(base, in.list({"model=" + in.dir.file("missing.json")})), "model");
  // Resuming: a checkpoint, or none.
  fs::create_directories(in.dir.file("ckpt"));
  test::write_text(in.dir.file("ckpt/trainer_state.json"), "{}");
  EXPECT_EQ(first_key(base, in.list({}, in.dir.file("ckpt"))), "--resume");
  const List resumed = in.list({}, in.dir.file("ckpt/"));
  ASSERT_NE(find(resumed, "--resume"), nullptr);
  EXPECT_EQ(find(resumed, "--resume")->value, "directory ckpt");
  ASSERT_NE(find(resumed, "--resume/trainer_state.json"), nullptr);
  EXPECT_EQ(find(resumed, "--resume/trainer_state.json")->value.rfind("2 bytes, fnv1a64 ", 0), 0u);
}

TEST(RankSettings, AModelDirectoryByConfigSafetensorsHeaderAndEveryTensorsBytes) {
  test::TempDir d;
  const std::string dir = d.file("model");
  fs::create_directories(dir);
  test::write_text(dir + "/config.json", test::kTinyChatModelJson);
  // A safetensors file: 8-byte header length, header, data.
  const auto write_weights = [&](const std::string& header, const std::string& data) {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i)
      bytes[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    std::ofstream(dir + "/model.safetensors", std::ios::binary) << bytes << header << data;
  };
  const std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  write_weights(header, std::string(8, '\1'));
  const auto list = [&] {
    List s;
    append_input_digests(s, "model", dir, false);
    return s;
  };
  const List base = list();
  // The directory, config.json, model.safetensors (sorted), then its one tensor.
  ASSERT_EQ(base.size(), 4u);
  EXPECT_EQ(base[0].value, "directory");
  EXPECT_EQ(base[1].key, "model/config.json");
  EXPECT_EQ(base[2].key, "model/model.safetensors");
  EXPECT_NE(base[2].value.find("header fnv1a64 "), std::string::npos) << base[2].value;
  EXPECT_EQ(base[3].key, "model/model.safetensors: w");
  EXPECT_EQ(base[3].value.rfind("F32 (2) xxh64 ", 0), 0u) << base[3].value;
  // Other weights under the same header (issue 54: they used to agree and train silently): the
  // tensor that differs is named.
  write_weights(header, std::string(8, '\2'));
  EXPECT_EQ(first_key(base, list()), "model/model.safetensors: w");
  // Another shape in the header.
  write_weights(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})"
                "    ",
                std::string(8, '\1'));
  EXPECT_EQ(first_key(base, list()), "model/model.safetensors");
  write_weights(header, std::string(8, '\1'));
  // Another config, or one more file.
  test::write_text(dir + "/config.json", std::string(test::kTinyChatModelJson) + " ");
  EXPECT_EQ(first_key(base, list()), "model/config.json");
  test::write_text(dir + "/config.json", test::kTinyChatModelJson);
  test::write_text(dir + "/generation_config.json", "{}");
  EXPECT_EQ(first_key(base, list()), "model/generation_config.json");
}

}  // namespace
}  // namespace sbp
