#include "data/tokenizer_pretokenize.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "data/tokenizer_scripts.h"
#include "data/tokenizer_utf8.h"

namespace sbp::tokenizer_detail {

namespace {

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

bool in_class(const PreTokenizerStep& s, char32_t cp) {
  switch (s.char_class) {
    case CharClass::WhiteSpace: return is_white_space(cp);
    case CharClass::Punctuation: return is_punctuation(cp);
    case CharClass::Numeric: return is_numeric(cp);
    case CharClass::OneChar: return cp == s.delimiter;
  }
  return false;
}

// The library's pattern for a `Fn(char) -> bool`: every matching character is a match of its own.
void char_matches_and_gaps(const PreTokenizerStep& s, std::string_view text,
                           std::vector<Piece>& out) {
  size_t gap = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t at = i;
    if (!in_class(s, utf8_next(text, i))) continue;
    if (gap < at) out.push_back({{gap, at}, false});
    out.push_back({{at, i}, true});
    gap = i;
  }
  if (gap < text.size()) out.push_back({{gap, text.size()}, false});
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

const std::string& gpt2_split_pattern() {
  static const std::string pattern =
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  return pattern;
}

const std::string& whitespace_pattern() {
  static const std::string pattern = [] {
    const std::string word = R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control})";
    return "[" + word + "]+|[^" + word + R"(\p{White_Space}]+)";
  }();
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
  if (s.kind == PreTokenizerStep::Kind::CharSplit) {
    run_char_split(step, piece, starts_text, emit);
    return;
  }
  if (s.kind == PreTokenizerStep::Kind::FixedLength) {
    run_fixed_length(step, piece, starts_text, emit);
    return;
  }
  if (s.kind == PreTokenizerStep::Kind::UnicodeScripts) {
    run_scripts(step, piece, starts_text, emit);
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

void PreTokenizer::run_char_split(size_t step, std::string_view piece, bool starts_text,
                                  const std::function<void(std::string_view)>& emit) const {
  const PreTokenizerStep& s = steps[step];
  std::vector<Piece> pieces;
  char_matches_and_gaps(s, piece, pieces);
  for (const Span& span : apply_behavior(pieces, s.behavior)) {
    if (span.end > span.begin) {
      run_from(step + 1, piece.substr(span.begin, span.end - span.begin),
               starts_text && span.begin == 0, emit);
    }
  }
}

void PreTokenizer::run_fixed_length(size_t step, std::string_view piece, bool starts_text,
                                    const std::function<void(std::string_view)>& emit) const {
  const size_t length = steps[step].length;
  for (size_t begin = 0; begin < piece.size();) {
    size_t end = begin;
    for (size_t n = 0; n < length && end < piece.size(); ++n)
      end += utf8_char_len(static_cast<unsigned char>(piece[end]));
    run_from(step + 1, piece.substr(begin, end - begin), starts_text && begin == 0, emit);
    begin = end;
  }
}

void PreTokenizer::run_scripts(size_t step, std::string_view piece, bool starts_text,
                               const std::function<void(std::string_view)>& emit) const {
  // The library's rule (SentencePiece's): a cut before each character whose script differs from
  // the last one seen. Characters without a script (Any: ' ', unassigned code points) never cut
  // and are not "seen"; Hiragana, Katakana and U+30FC count as Han. As in the library, what
  // comes before the first character with a script is dropped (a leading ' ', say).
  constexpr int32_t kNone = -1;
  size_t begin = std::string_view::npos;
  int32_t last = kNone;
  for (size_t i = 0; i < piece.size();) {
    const size_t at = i;
    const int32_t script = fixed_script(utf8_next(piece, i));
    if (script == kScriptAny) continue;
    if (script != last) {
      if (begin != std::string_view::npos)
        run_from(step + 1, piece.substr(begin, at - begin), starts_text && begin == 0, emit);
      begin = at;
    }
    last = script;
  }
  if (begin != std::string_view::npos)
    run_from(step + 1, piece.substr(begin), starts_text && begin == 0, emit);
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
