#include "data/tokenizer_pretokenize.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "data/tokenizer_utf8.h"

namespace sbp::tokenizer_detail {

namespace {

bool is_ascii(std::string_view s) {
  unsigned char any = 0;
  for (char c : s) any |= static_cast<unsigned char>(c);
  return any < 0x80;
}

utf8proc_option_t options_for(NormalForm form) {
  const int base = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::NFC: return static_cast<utf8proc_option_t>(base | UTF8PROC_COMPOSE);
    case NormalForm::NFD: return static_cast<utf8proc_option_t>(base | UTF8PROC_DECOMPOSE);
    case NormalForm::NFKC:
      return static_cast<utf8proc_option_t>(base | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    case NormalForm::NFKD:
      return static_cast<utf8proc_option_t>(base | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  }
  return static_cast<utf8proc_option_t>(base);
}

struct Piece {
  Span span;
  bool is_match;
};

// The library's Pattern::find_matches: the matches and the gaps between them, covering `text`.
void matches_and_gaps(const Regex& regex, std::string_view text, std::vector<Piece>& out) {
  std::vector<Span> matches;
  regex.find_all(text, matches);
  size_t prev = 0;
  for (const Span& m : matches) {
    if (prev != m.begin) out.push_back({{prev, m.begin}, false});
    out.push_back({m, true});
    prev = m.end;
  }
  if (prev != text.size()) out.push_back({{prev, text.size()}, false});
}

// Applies a SplitBehavior: returns the spans to keep, in order (empty ones included; the caller
// drops them, as the library does).
std::vector<Span> apply_behavior(const std::vector<Piece>& pieces, SplitBehavior behavior) {
  std::vector<Span> out;
  out.reserve(pieces.size());
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (const Piece& p : pieces) out.push_back(p.span);
      break;
    case SplitBehavior::Removed:
      for (const Piece& p : pieces)
        if (!p.is_match) out.push_back(p.span);
      break;
    case SplitBehavior::Contiguous: {
      // Runs of consecutive matches become one piece.
      bool previous_match = false;
      for (const Piece& p : pieces) {
        if (p.is_match == previous_match && !out.empty()) {
          out.back().end = p.span.end;
        } else {
          out.push_back(p.span);
        }
        previous_match = p.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithPrevious: {
      bool previous_match = false;
      for (const Piece& p : pieces) {
        if (p.is_match && !previous_match && !out.empty()) {
          out.back().end = p.span.end;
        } else {
          out.push_back(p.span);
        }
        previous_match = p.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      // The mirror image: walk right to left, glue a match onto the piece after it.
      bool previous_match = false;
      for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().begin = it->span.begin;
        } else {
          out.push_back(it->span);
        }
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  return out;
}

}  // namespace

std::string_view Normalizer::apply(std::string_view text, std::string& buffer) const {
  std::string_view current = text;
  std::string next;
  for (const NormalizerStep& step : steps) {
    // `current` may point into `buffer`, so the step writes elsewhere and the two swap.
    if (!apply_step(step, current, next)) continue;
    buffer.swap(next);
    current = buffer;
  }
  return current;
}

bool Normalizer::apply_step(const NormalizerStep& step, std::string_view text, std::string& out) {
  switch (step.kind) {
    case NormalizerStep::Kind::Form:
      // Every normal form leaves ASCII unchanged; most training text is mostly ASCII.
      if (is_ascii(text)) return false;
      normalize_runs(text, step.form, out);
      return true;
    case NormalizerStep::Kind::Replace: {
      // Leftmost non-overlapping occurrences, as the library's String pattern. Both strings are
      // valid UTF-8, so a byte match always starts on a character boundary.
      size_t at = text.find(step.pattern);
      if (at == std::string_view::npos) return false;
      out.clear();
      out.reserve(text.size() + text.size() / 2);
      size_t done = 0;
      for (; at != std::string_view::npos; at = text.find(step.pattern, done)) {
        out.append(text.substr(done, at - done));
        out += step.content;
        done = at + step.pattern.size();
      }
      out.append(text.substr(done));
      return true;
    }
    case NormalizerStep::Kind::Prepend:
      if (text.empty()) return false;  // the library leaves an empty piece empty
      out.clear();
      out += step.content;
      out += text;
      return true;
  }
  return false;
}

void Normalizer::normalize_runs(std::string_view text, NormalForm form, std::string& out) {
  // Only runs of non-ASCII characters need utf8proc. An ASCII character is a starter that no
  // composition takes as its second part, so a run can only interact with the one ASCII
  // character before it (e + U+0301 -> é): that character is normalized along with the run.
  out.clear();
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      out += text[i++];
      continue;
    }
    size_t begin = i;
    if (begin > 0) {
      --begin;
      out.pop_back();
    }
    while (i < text.size() && static_cast<unsigned char>(text[i]) >= 0x80) ++i;
    utf8proc_uint8_t* result = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + begin),
                     static_cast<utf8proc_ssize_t>(i - begin), &result, options_for(form));
    if (n < 0) {
      throw InputError(std::string("tokenizer: normalization failed: ") + utf8proc_errmsg(n));
    }
    out.append(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
    std::free(result);
  }
}

const std::string& gpt2_split_pattern() {
  static const std::string pattern =
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  return pattern;
}

void PreTokenizer::run(std::string_view text, bool starts_text,
                       const std::function<void(std::string_view)>& emit) const {
  if (!text.empty()) run_from(0, text, starts_text, emit);
}

void PreTokenizer::run_from(size_t step, std::string_view piece, bool starts_text,
                            const std::function<void(std::string_view)>& emit) const {
  if (step == steps.size()) {
    emit(piece);
    return;
  }
  const PreTokenizerStep& s = steps[step];
  if (s.kind == PreTokenizerStep::Kind::Split) {
    std::vector<Piece> pieces;
    matches_and_gaps(*s.regex, piece, pieces);
    if (s.invert)
      for (Piece& p : pieces) p.is_match = !p.is_match;
    for (const Span& span : apply_behavior(pieces, s.behavior)) {
      if (span.end > span.begin) {
        run_from(step + 1, piece.substr(span.begin, span.end - span.begin),
                 starts_text && span.begin == 0, emit);
      }
    }
    return;
  }
  if (s.kind == PreTokenizerStep::Kind::Metaspace) {
    run_metaspace(step, piece, starts_text, emit);
    return;
  }
  // ByteLevel: optional leading space, optional GPT-2 split, then every byte becomes its
  // printable stand-in character (so BPE never sees a space, control byte or half a character).
  std::string prefixed;
  std::string_view text = piece;
  if (s.add_prefix_space && piece.front() != ' ') {
    prefixed.reserve(piece.size() + 1);
    prefixed += ' ';
    prefixed += piece;
    text = prefixed;
  }
  const ByteLevelAlphabet& alphabet = byte_level_alphabet();
  std::string mapped;
  auto map_and_continue = [&](std::string_view part) {
    mapped.clear();
    for (char c : part) mapped += alphabet.byte_to_utf8[static_cast<unsigned char>(c)];
    // After ByteLevel no step asks for the text start (Metaspace after ByteLevel is refused).
    run_from(step + 1, mapped, false, emit);
  };
  if (!s.regex) {
    map_and_continue(text);
    return;
  }
  std::vector<Piece> pieces;
  matches_and_gaps(*s.regex, text, pieces);
  for (const Piece& p : pieces) {
    if (p.span.end > p.span.begin)
      map_and_continue(text.substr(p.span.begin, p.span.end - p.span.begin));
  }
}

void PreTokenizer::run_metaspace(size_t step, std::string_view piece, bool starts_text,
                                 const std::function<void(std::string_view)>& emit) const {
  // The library's Metaspace: every ' ' becomes the replacement, the replacement goes in front
  // (per the prepend scheme) unless the piece already starts with it, then optionally a split
  // before each replacement (MergedWithNext).
  const PreTokenizerStep& s = steps[step];
  std::string text;
  text.reserve(piece.size() + s.replacement.size());
  const bool starts_with_space = piece.front() == ' ';
  const bool prepend =
      !starts_with_space && piece.substr(0, s.replacement.size()) != s.replacement &&
      (s.prepend == PrependScheme::Always || (s.prepend == PrependScheme::First && starts_text));
  if (prepend) text += s.replacement;
  for (char c : piece) {
    if (c == ' ') {
      text += s.replacement;
    } else {
      text += c;
    }
  }
  if (!s.regex) {
    run_from(step + 1, text, starts_text, emit);
    return;
  }
  std::vector<Piece> pieces;
  matches_and_gaps(*s.regex, text, pieces);
  for (const Span& span : apply_behavior(pieces, SplitBehavior::MergedWithNext)) {
    if (span.end > span.begin) {
      run_from(step + 1, std::string_view(text).substr(span.begin, span.end - span.begin),
               starts_text && span.begin == 0, emit);
    }
  }
}

}  // namespace sbp::tokenizer_detail
