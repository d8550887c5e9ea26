// core/output_file's one rule for output paths, and core/output_paths' rules for outputs that
// overlap inputs and for directories streambp may replace. Everything under a TempDir: a FIFO
// stands in for a device, symlinks lead to files inside the scratch directory.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/output_file.h"
#include "core/output_paths.h"
#include "support/test_support.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

size_t entries(const std::string& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

TEST(OutputFile, NewAndRegularFilesAreReplacedWholeWithoutLeftovers) {
  test::TempDir tmp;
  const std::string f = tmp.file("out.json");
  write_file_atomically(f, "one\n");
  EXPECT_EQ(test::read_text(f), "one\n");
  write_file_atomically(f, "two\n");
  EXPECT_EQ(test::read_text(f), "two\n");
  EXPECT_EQ(entries(tmp.path()), 1u);  // no temporary left beside it
  EXPECT_EQ(output_target(f).kind, OutputTarget::replace);
}

TEST(OutputFile, UncommittedLeavesTheTargetAsItWas) {
  test::TempDir tmp;
  const std::string f = tmp.file("out.json");
  test::write_text(f, "old\n");
  {
    OutputFile o(f);
    o.write("half");
  }
  EXPECT_EQ(test::read_text(f), "old\n");
  EXPECT_EQ(entries(tmp.path()), 1u);
}

TEST(OutputFile, SymlinkToAFileIsWrittenThroughAndStaysALink) {
  test::TempDir tmp;
  fs::create_directories(tmp.file("real"));
  const std::string file = tmp.file("real/results.json"), link = tmp.file("link.json");
  test::write_text(file, "old\n");
  fs::create_symlink(file, link);
  write_file_atomically(link, "new\n");
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(fs::read_symlink(link).string(), file);
  EXPECT_EQ(test::read_text(file), "new\n");
  EXPECT_EQ(entries(tmp.file("real")), 1u);
}

TEST(OutputFile, DanglingSymlinkIsRefusedAndNothingIsCreated) {
  test::TempDir tmp;
  const std::string link = tmp.file("link.json"), target = tmp.file("target.json");
  fs::create_symlink(target, link);
  const std::string e = error_of([&] { write_file_atomically(link, "x"); });
  EXPECT_NE(e.find(link + ": is a symlink to " + target + ", which does not exist"),
            std::string::npos)
      << e;
  EXPECT_FALSE(fs::exists(target));
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(entries(tmp.path()), 1u);
}

TEST(OutputFile, FifoIsWrittenThroughNotReplaced) {
  test::TempDir tmp;
  const std::string fifo = tmp.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(output_target(fifo).kind, OutputTarget::stream);
  std::string got;
  std::thread reader([&] {
    const int fd = ::open(fifo.c_str(), O_RDONLY);
    char buf[256];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
    ::close(fd);
  });
  write_file_atomically(fifo, "through\n");
  reader.join();
  EXPECT_EQ(got, "through\n");
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_EQ(entries(tmp.path()), 1u);  // no temporary, no rename
}

TEST(OutputFile, SymlinkToAFifoIsWrittenThroughLikeOne) {
  // /dev/stdout is itself a link (to /proc/self/fd/1): a link to a stream is a stream.
  test::TempDir tmp;
  const std::string fifo = tmp.file("fifo"), link = tmp.file("stdout");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  fs::create_symlink(fifo, link);
  EXPECT_EQ(output_target(link).kind, OutputTarget::stream);
}

TEST(OutputFile, DirectoryIsRefused) {
  test::TempDir tmp;
  const std::string e = error_of([&] { write_file_atomically(tmp.path(), "x"); });
  EXPECT_EQ(e, tmp.path() + ": is a directory, cannot write it");
}

TEST(OutputPaths, WithinResolvesLinksAndDotDot) {
  test::TempDir tmp;
  fs::create_directories(tmp.file("model"));
  fs::create_symlink(tmp.file("model"), tmp.file("alias"));
  EXPECT_TRUE(path_within(tmp.file("model"), tmp.file("model/")));
  EXPECT_TRUE(path_within(tmp.file("model/config.json"), tmp.file("model")));
  EXPECT_TRUE(path_within(tmp.file("alias/x"), tmp.file("model")));
  EXPECT_TRUE(path_within(tmp.file("other/../model/x"), tmp.file("model")));
  EXPECT_FALSE(path_within(tmp.file("model2"), tmp.file("model")));
  EXPECT_FALSE(path_within(tmp.file("model"), tmp.file("model/x")));
}

TEST(OutputPaths, OutputOverAnInputIsRefusedNamingBoth) {
  test::TempDir tmp;
  const std::string in = tmp.file("prompts.jsonl");
  test::write_text(in, "{}\n");
  EXPECT_EQ(error_of([&] { refuse_output_over_inputs({"--output", in}, {{"--input", in}}); }),
            "--output " + in + " is --input " + in +
                ": refusing to write over an input; choose another --output");
  EXPECT_NE(error_of([&] {
              refuse_output_over_inputs({"--out", tmp.path()}, {{"--input", in}});
            }).find(" holds --input "),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              refuse_output_over_inputs({"--json", tmp.file("x/y")}, {{"--model", tmp.path()}});
            }).find(" is inside --model "),
            std::string::npos);
  // Absent inputs (a preset name) and separate paths pass.
  EXPECT_EQ(error_of([&] {
              refuse_output_over_inputs({"--json", tmp.file("out.json")},
                                        {{"--model", "tiny-qwen3"}, {"--input", in}});
            }),
            "");
  // A FIFO is written through: it cannot destroy an input even when it is one.
  const std::string fifo = tmp.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { refuse_output_over_inputs({"--output", fifo}, {{"--input", fifo}}); }),
            "");
}

TEST(OutputPaths, FirstForeignFileIsTheFirstByName) {
  test::TempDir tmp;
  auto ours = [](const std::string& n) { return n == "config.json" || n == "model.safetensors"; };
  EXPECT_EQ(first_foreign_file(tmp.path(), ours), "");
  test::write_text(tmp.file("config.json"), "{}");
  test::write_text(tmp.file("model.safetensors"), "");
  EXPECT_EQ(first_foreign_file(tmp.path(), ours), "");
  test::write_text(tmp.file("z.txt"), "");
  fs::create_directories(tmp.file("b"));
  EXPECT_EQ(first_foreign_file(tmp.path(), ours), "b");
  fs::remove(tmp.file("b"));
  EXPECT_EQ(first_foreign_file(tmp.path(), ours), "z.txt");
  // A link named like one of ours is not ours.
  fs::remove(tmp.file("z.txt"));
  fs::remove(tmp.file("config.json"));
  fs::create_symlink(tmp.file("model.safetensors"), tmp.file("config.json"));
  EXPECT_EQ(first_foreign_file(tmp.path(), ours), "config.json");
}

}  // namespace
}  // namespace sbp
