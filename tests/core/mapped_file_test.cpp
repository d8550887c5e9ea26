// core/mapped_file: the one mapping of an untrusted file that the safetensors and GGUF readers
// share, and its refusals before anything is mapped, each naming the path and the format.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>

#include "core/error.h"
#include "core/mapped_file.h"
#include "support/test_support.h"

namespace sbp {
namespace {

constexpr MappedFormat kFormat = {"test file", 4, "test header"};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(MappedFile, MapsTheWholeFileReadOnly) {
  test::TempDir tmp;
  const std::string path = tmp.file("f");
  test::write_text(path, "abcdefg");
  const MappedFile f(path, kFormat);
  ASSERT_EQ(f.size(), 7u);
  EXPECT_EQ(std::memcmp(f.bytes(), "abcdefg", 7), 0);
  f.advise_sequential();  // a hint only: the bytes stay as they are
  EXPECT_EQ(std::memcmp(f.bytes(), "abcdefg", 7), 0);
}

TEST(MappedFile, RefusesNamingThePathAndTheFormat) {
  test::TempDir tmp;
  const std::string missing = tmp.file("missing"), short_file = tmp.file("short"),
                    empty = tmp.file("empty");
  test::write_text(short_file, "abc");
  test::write_text(empty, "");
  EXPECT_TRUE(error_of([&] { MappedFile f(missing, kFormat); })
                  .starts_with(missing + ": cannot open test file: "));
  EXPECT_EQ(error_of([&] { MappedFile f(short_file, kFormat); }),
            short_file + ": file is 3 bytes, shorter than the 4-byte test header");
  EXPECT_EQ(error_of([&] { MappedFile f(empty, kFormat); }),
            empty + ": file is 0 bytes, shorter than the 4-byte test header");
  EXPECT_EQ(error_of([&] { MappedFile f(tmp.path(), kFormat); }),
            tmp.path() + ": is a directory, not a regular file");
}

}  // namespace
}  // namespace sbp
