// `streambp tokenize`: JSON lines in, JSON lines out, with a tokenizer.json tokenizer.
//   {"text": "..."}  ->  {"ids": [...]}            (default)
//   {"ids": [...]}   ->  {"text": "..."}           (--decode)
// and `--bench FILE`, which times encoding one whole file (the number docs/TOKENIZER.md quotes).
#include <charconv>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/untrusted_json.h"
#include "core/input_file.h"
#include "data/tokenizer.h"

namespace sbp::cli {

namespace {

struct TokenizeOptions {
  std::string tokenizer;
  std::string input;  // empty: stdin
  std::string bench;
  bool decode = false;
  bool skip_special = false;
  bool special_as_text = false;
};

Tokenizer load_tokenizer(const std::string& path) {
  if (std::filesystem::is_directory(path)) return Tokenizer::from_dir(path);
  return Tokenizer::from_file(path);
}

void append_ids(std::string& out, const std::vector<int32_t>& ids) {
  out += "{\"ids\": [";
  char buf[16];
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ", ";
    const auto r = std::to_chars(buf, buf + sizeof buf, ids[i]);
    out.append(buf, r.ptr);
  }
  out += "]}\n";
}

// One input line to one output line; `where` ("file:line") prefixes every error.
void process_line(const Tokenizer& tok, const TokenizeOptions& opt, const std::string& line,
                  const std::string& where, std::string& out) {
  nlohmann::json row;
  try {
    row = parse_untrusted_json(line, where);
  } catch (const nlohmann::json::exception& e) {  // also out_of_range: 1e999
    throw InputError(where + ": not valid JSON: " + e.what());
  }
  try {
    if (!opt.decode) {
      auto text = row.is_object() ? row.find("text") : row.end();
      if (!row.is_object() || text == row.end() || !text->is_string()) {
        throw InputError("expected an object with a string field \"text\"");
      }
      append_ids(out, tok.encode(text->get_ref<const std::string&>(), !opt.special_as_text));
      return;
    }
    auto ids = row.is_object() ? row.find("ids") : row.end();
    if (!row.is_object() || ids == row.end() || !ids->is_array()) {
      throw InputError("expected an object with a list field \"ids\"");
    }
    std::vector<int32_t> values;
    values.reserve(ids->size());
    for (size_t i = 0; i < ids->size(); ++i) {
      const auto& v = (*ids)[i];
      if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX) {
        throw InputError("ids[" + std::to_string(i) + "] is not a token id: " + v.dump());
      }
      values.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
    const nlohmann::json result = {{"text", tok.decode(values, opt.skip_special)}};
    out += result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    out += '\n';
  } catch (const InputError& e) {
    throw InputError(where + ": " + e.what());
  }
}

void run_lines(const TokenizeOptions& opt) {
  const Tokenizer tok = load_tokenizer(opt.tokenizer);
  std::ifstream file;
  std::istream* in = &std::cin;
  const std::string name = opt.input.empty() ? "<stdin>" : opt.input;
  if (!opt.input.empty()) {
    check_input_file(opt.input);
    file.open(opt.input, std::ios::binary);
    if (!file) throw InputError(opt.input + ": cannot open input file");
    in = &file;
  }
  std::string line, out;
  for (int64_t line_no = 1; std::getline(*in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;  // a blank line (e.g. at the end of a file) holds no record
    out.clear();
    process_line(tok, opt, line, name + ":" + std::to_string(line_no), out);
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  std::fflush(stdout);
}

void run_bench(const TokenizeOptions& opt) {
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  const Tokenizer tok = load_tokenizer(opt.tokenizer);
  auto t1 = clock::now();
  const std::string text = read_input_file(opt.bench);
  auto t2 = clock::now();
  // Process CPU time as well as wall time: on a busy machine the CPU time is the steadier number.
  const std::clock_t c2 = std::clock();
  const std::vector<int32_t> ids = tok.encode(text, !opt.special_as_text);
  const std::clock_t c3 = std::clock();
  auto t3 = clock::now();
  const std::string back = tok.decode(ids);
  auto t4 = clock::now();
  auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  const double mb = static_cast<double>(text.size()) / 1e6;
  std::printf("load      %8.3f s\n", secs(t0, t1));
  const double cpu = static_cast<double>(c3 - c2) / CLOCKS_PER_SEC;
  std::printf("encode    %8.3f s  %.2f MB -> %zu tokens  %.2f MB/s  (cpu %.3f s, %.2f MB/s)\n",
              secs(t2, t3), mb, ids.size(), mb / secs(t2, t3), cpu, mb / cpu);
  std::printf("decode    %8.3f s  %.2f MB/s  round trip %s\n", secs(t3, t4), mb / secs(t3, t4),
              back == text ? "identical" : "differs (normalization or special tokens)");
}

}  // namespace

void register_tokenize(CLI::App& app) {
  auto opt = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Encode JSON lines {\"text\": ...} to {\"ids\": [...]} (or back with --decode)");
  cmd->add_option("--tokenizer", opt->tokenizer,
                  "Directory with tokenizer.json (or GPT-2 encoder.json + vocab.bpe), or a "
                  "tokenizer.json file")
      ->required();
  cmd->add_option("--input", opt->input, "JSONL file to read (default: stdin)");
  cmd->add_flag("--decode", opt->decode, "Read {\"ids\": [...]} lines and write {\"text\": ...}");
  cmd->add_flag("--skip-special", opt->skip_special, "With --decode: leave out special tokens");
  cmd->add_flag("--special-as-text", opt->special_as_text,
                "Do not recognise special tokens in the text; tokenize them as plain text");
  cmd->add_option("--bench", opt->bench,
                  "Time encoding this whole file as one text and print MB/s (no JSON I/O)");
  cmd->callback([opt] {
    if (!opt->bench.empty()) {
      run_bench(*opt);
    } else {
      run_lines(*opt);
    }
  });
}

}  // namespace sbp::cli
