#include "data/data_source.h"

#include <fstream>
#include <streambuf>
#include <string_view>

#include "core/error.h"
#include "core/input_file.h"

namespace sbp {

namespace {

// Reads the text where it lies (a data set in memory can be large: no second copy). The
// stream keeps the text alive while it is read.
class TextStream : public std::istream {
 public:
  explicit TextStream(std::shared_ptr<const std::string> text)
      : std::istream(nullptr), text_(std::move(text)), buf_(*text_) {
    rdbuf(&buf_);  // now that buf_ exists (bases are built before members)
  }

 private:
  struct Buf : std::streambuf {
    explicit Buf(const std::string& s) {
      char* p = const_cast<char*>(s.data());  // get area only: never written through
      setg(p, p, p + s.size());
    }
  };
  std::shared_ptr<const std::string> text_;
  Buf buf_;
};

constexpr std::string_view kInMemory = " (in memory)";

}  // namespace

std::string in_memory_label(const std::string& key) { return key + std::string(kInMemory); }

std::unique_ptr<std::istream> DataSource::open(const std::string& what) const {
  if (text) return std::make_unique<TextStream>(text);
  // A resumed run whose config names records that were given in memory: they are not on disk.
  if (name.size() > kInMemory.size() && name.ends_with(kInMemory)) {
    std::string keyword = name.substr(0, name.size() - kInMemory.size());  // data__train
    for (std::string::size_type dot; (dot = keyword.find('.')) != std::string::npos;)
      keyword.replace(dot, 1, "__");
    throw InputError(name + ": the run's records were given in memory (Python), not in a file; "
                            "give them again: streambp.train(..., " + keyword + "=records)");
  }
  check_input_file(name);
  auto in = std::make_unique<std::ifstream>(name, std::ios::binary);
  if (!*in) throw InputError(name + ": cannot open " + what);
  return in;
}

}  // namespace sbp
