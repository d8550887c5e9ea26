#include "data/dataset.h"

#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/untrusted_json.h"

namespace sbp {

namespace {

constexpr size_t kBlockLines = 2048;  // lines parsed and tokenized in parallel at a time

// One line's outcome, computed on any thread.
struct LineResult {
  bool blank = false;
  std::string error;  // non-empty: the line's one-line error (already prefixed with file:line)
  Record record;      // only the fields rollout grouping needs are kept after encoding
  std::vector<TokenizedSequence> sequences;
};

std::string where(const std::string& path, int64_t line) {
  return path + ":" + std::to_string(line);
}

nlohmann::json parse_line(const std::string& line, const std::string& at) {
  try {
    return parse_untrusted_json(line, at);
  } catch (const nlohmann::json::exception& e) {  // also out_of_range: 1e999
    // nlohmann's message starts with "[json.exception.parse_error.101] parse error at ...".
    std::string msg = e.what();
    if (const size_t p = msg.find("] "); p != std::string::npos) msg = msg.substr(p + 2);
    // "parse error at line 1, column 15: ..." — the line is the record's, named already.
    if (const size_t c = msg.find("column ");
        msg.starts_with("parse error at line 1, ") && c != std::string::npos)
      msg = msg.substr(c);
    throw InputError(at + ": not valid JSON: " + msg);
  }
}

bool is_blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

}  // namespace

int64_t Example::tokens() const {
  int64_t n = 0;
  for (const TokenizedSequence& s : sequences) n += s.size();
  return n;
}

int64_t Example::loss_tokens() const {
  int64_t n = 0;
  for (const TokenizedSequence& s : sequences) n += s.loss_tokens();
  return n;
}

std::string Dataset::summary() const {
  std::string s = path + ": " + std::to_string(stats.records) + " " + data_format_name(format) +
                  " records -> " + std::to_string(examples.size()) +
                  (format == DataFormat::rollout      ? " groups"
                   : format == DataFormat::preference ? " pairs"
                                                      : " examples") +
                  ", " + std::to_string(stats.tokens) + " tokens (" +
                  std::to_string(stats.loss_tokens) + " trained), longest " +
                  std::to_string(stats.longest);
  if (stats.truncated) s += ", " + std::to_string(stats.truncated) + " truncated";
  if (stats.skipped) s += ", " + std::to_string(stats.skipped) + " skipped as too long";
  if (stats.dropped_no_loss)
    s += ", " + std::to_string(stats.dropped_no_loss) +
         " dropped (no trained token left after truncation)";
  if (stats.inexact)
    s += ", " + std::to_string(stats.inexact) +
         " tokenized range by range (text changed by normalization)";
  return s;
}

Dataset load_dataset(const DataSource& source, const ExampleEncoder& encoder,
                     const DatasetOptions& opts) {
  const std::string& path = source.name;
  const std::unique_ptr<std::istream> stream = source.open("data file");
  std::istream& in = *stream;
  Dataset ds;
  ds.path = path;
  std::optional<DataFormat> format = opts.format;
  std::string detected_from = "data.format";
  std::map<std::string, size_t> group_of_prompt;  // rollout: prompt JSON -> example index

  // Keeps a sequence within max_seq_len per the policy; false: leave the record out.
  auto fit = [&](TokenizedSequence& s, const std::string& at) {
    if (s.size() <= opts.max_seq_len) return true;
    if (opts.truncation == Truncation::skip) return false;
    if (opts.truncation == Truncation::error) {
      throw InputError(at + ": example has " + std::to_string(s.size()) +
                       " tokens, more than max_seq_len " + std::to_string(opts.max_seq_len) +
                       " (set data.truncation to truncate or skip, or raise max_seq_len)");
    }
    s.ids.resize(static_cast<size_t>(opts.max_seq_len));
    s.mask.resize(static_cast<size_t>(opts.max_seq_len));
    ++ds.stats.truncated;
    return true;
  };

  std::vector<std::string> lines;
  std::vector<LineResult> results;
  int64_t first_line = 1;
  bool eof = false;
  while (!eof) {
    lines.clear();
    std::string line;
    while (lines.size() < kBlockLines) {
      if (!std::getline(in, line)) {
        eof = true;
        break;
      }
      lines.push_back(std::move(line));
    }
    // The file's format comes from its first record, before the parallel part needs it.
    if (!format) {
      for (size_t i = 0; i < lines.size(); ++i) {
        if (is_blank(lines[i])) continue;
        const std::string at = where(path, first_line + static_cast<int64_t>(i));
        format = detect_data_format(parse_line(lines[i], at), at);
        detected_from = "line " + std::to_string(first_line + static_cast<int64_t>(i));
        break;
      }
    }
    results.assign(lines.size(), LineResult{});
    const int64_t n = static_cast<int64_t>(lines.size());
#pragma omp parallel for schedule(dynamic, 8)
    for (int64_t i = 0; i < n; ++i) {
      LineResult& r = results[static_cast<size_t>(i)];
      const std::string& text = lines[static_cast<size_t>(i)];
      if (is_blank(text)) {
        r.blank = true;
        continue;
      }
      const std::string at = where(path, first_line + i);
      try {
        r.record = parse_record(parse_line(text, at), *format, at, detected_from);
        r.sequences = encoder.encode(r.record);
      } catch (const Error& e) {
        r.error = e.what();
        if (!r.error.starts_with(path + ":")) r.error = at + ": " + r.error;
      } catch (const std::exception& e) {
        r.error = at + ": " + e.what();
      }
    }
    // In file order: the first error wins, and groups form in order of first appearance.
    for (int64_t i = 0; i < n; ++i) {
      LineResult& r = results[static_cast<size_t>(i)];
      if (r.blank) continue;
      if (!r.error.empty()) throw InputError(r.error);
      const int64_t line_no = first_line + i;
      const std::string at = where(path, line_no);
      ++ds.stats.records;
      bool keep = true;
      for (TokenizedSequence& s : r.sequences) keep = fit(s, at) && keep;
      if (!keep) {
        ++ds.stats.skipped;
        continue;
      }
      for (const TokenizedSequence& s : r.sequences) ds.stats.inexact += s.exact ? 0 : 1;
      if (*format == DataFormat::rollout) {
        auto [it, fresh] = group_of_prompt.emplace(r.record.group_key, ds.examples.size());
        if (fresh) ds.examples.emplace_back();
        Example& g = ds.examples[it->second];
        g.sequences.push_back(std::move(r.sequences[0]));
        g.rewards.push_back(r.record.reward);
        g.lines.push_back(line_no);
      } else {
        Example e;
        e.lines.assign(r.sequences.size(), line_no);
        // KTO's label travels as the sequence's reward (1 desirable, 0 undesirable).
        if (*format == DataFormat::unpaired_preference) e.rewards = {r.record.label ? 1.0 : 0.0};
        e.sequences = std::move(r.sequences);
        ds.examples.push_back(std::move(e));
      }
    }
    first_line += n;
  }
  if (ds.stats.records == 0) throw InputError(path + ": no records (the file is empty)");
  ds.format = *format;

  // Whole examples: each must fit one micro-batch, and must still train something.
  std::vector<Example> kept;
  kept.reserve(ds.examples.size());
  for (Example& e : ds.examples) {
    const std::string at = where(path, e.lines.front());
    if (e.tokens() > opts.max_tokens) {
      const std::string what = ds.format == DataFormat::rollout
                                   ? "the group of " + std::to_string(e.sequences.size()) +
                                         " completions for the prompt first seen here has "
                                   : "the chosen and rejected sequences together have ";
      if (opts.truncation != Truncation::skip) {
        throw InputError(at + ": " + what + std::to_string(e.tokens()) +
                         " tokens, more than max_tokens " + std::to_string(opts.max_tokens) +
                         " (they go into one micro-batch: raise max_tokens, lower max_seq_len, "
                         "or set data.truncation: skip)");
      }
      ds.stats.skipped += static_cast<int64_t>(e.sequences.size());
      continue;
    }
    bool trains = true;
    for (const TokenizedSequence& s : e.sequences) trains = trains && s.loss_tokens() > 0;
    if (!trains) {
      ++ds.stats.dropped_no_loss;
      continue;
    }
    for (const TokenizedSequence& s : e.sequences) {
      ds.stats.tokens += s.size();
      ds.stats.loss_tokens += s.loss_tokens();
      ds.stats.longest = std::max(ds.stats.longest, s.size());
    }
    kept.push_back(std::move(e));
  }
  ds.examples = std::move(kept);
  if (ds.examples.empty()) {
    throw InputError(path + ": no examples left after truncation (" +
                     std::to_string(ds.stats.skipped) + " skipped, " +
                     std::to_string(ds.stats.dropped_no_loss) + " without trained tokens)");
  }
  return ds;
}

}  // namespace sbp
