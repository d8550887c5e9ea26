#include "support/test_support.h"

#include "backend/backend_factory.h"

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace sbp::test {

std::vector<ExecConfig> equality_modes(
    int64_t T, const std::vector<std::pair<int64_t, int64_t>>& extra_stream_chunks) {
  std::vector<ExecConfig> modes;
  std::vector<std::pair<int64_t, int64_t>> chunks = {
      {1, 1}, {7, 5}, {T / 3, T / 3}, {T, T}, {11, 13}};
  chunks.insert(chunks.end(), extra_stream_chunks.begin(), extra_stream_chunks.end());
  for (const auto& [lc, hc] : chunks) {
    ExecConfig s = parse_mode("stream");
    s.layer_chunk = lc;
    s.head_chunk = hc;
    modes.push_back(s);
  }
  modes.push_back(parse_mode("checkpoint"));
  ExecConfig rc = parse_mode("recompute+chunked");
  rc.head_chunk = 9;
  modes.push_back(rc);
  ExecConfig sc = parse_mode("store+chunked");
  sc.head_chunk = 4;
  modes.push_back(sc);
  ExecConfig sf = parse_mode("stream+full");
  sf.layer_chunk = 6;
  modes.push_back(sf);
  return modes;
}

double rel_err(const float* a, const float* b, int64_t n) {
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    if (!(d <= num)) num = d;  // NaN propagates as "infinitely wrong"
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  if (std::isnan(num)) return INFINITY;
  if (den == 0.0) return num == 0.0 ? 0.0 : INFINITY;
  return num / den;
}

double rel_err(const Tensor& a, const Tensor& b) {
  if (a.shape != b.shape) throw std::runtime_error("rel_err: shapes differ");
  const std::vector<float> av = download_f32(a), bv = download_f32(b);
  return rel_err(av.data(), bv.data(), a.numel());
}

void fill_normal(const Tensor& t, Rng& rng, float scale) {
  std::vector<float> p(static_cast<size_t>(t.numel()));
  for (float& x : p) x = scale * rng.normal();
  upload_f32(t, p);
}

std::unique_ptr<Backend> backend() {
  // STREAMBP_TEST_BACKEND=cuda runs the tests that use this backend (the Hugging Face parity
  // fixtures among them) on the GPU: scripts/gpu-check.sh.
  const char* name = std::getenv("STREAMBP_TEST_BACKEND");
  return make_backend(name && *name ? parse_backend(name) : BackendSpec{});
}

std::vector<unsigned char> bytes_of(const Tensor& t) {
  std::vector<unsigned char> out(t.nbytes());
  if (out.empty()) return out;
  if (t.memory)
    t.memory->download(out.data(), t);
  else
    std::memcpy(out.data(), t.data, out.size());
  return out;
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "streambp-test-XXXXXX").string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

CommandResult run_command(const std::string& cmd) {
  CommandResult r = run_command_raw(cmd);
  // "streambp: warning: <provider> runs its generic '<core>' kernels on this ..." (openblas,
  // blis: blas_core_check.cpp), wherever it starts a line.
  const std::string head = "streambp: warning: ", tail = " runs its generic '";
  for (size_t at = r.output.find(head); at != std::string::npos; at = r.output.find(head, at)) {
    const size_t end = r.output.find('\n', at);
    const size_t len = end == std::string::npos ? std::string::npos : end + 1 - at;
    const bool line_start = at == 0 || r.output[at - 1] == '\n';
    if (line_start && r.output.substr(at, len).find(tail) != std::string::npos)
      r.output.erase(at, len);
    else
      at += head.size();
  }
  return r;
}

CommandResult run_command_raw(const std::string& cmd) {
  CommandResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) throw std::runtime_error("popen failed: " + cmd);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return r;
}

// The environment may override where the build put them: a build carried to another machine
// (scripts/gpu-check.sh) runs its tests from another directory.
std::string streambp_binary() {
  const char* env = std::getenv("STREAMBP_TEST_BINARY");
  return env && *env ? env : STREAMBP_BINARY;
}
std::string source_dir() {
  const char* env = std::getenv("STREAMBP_TEST_SOURCE_DIR");
  return env && *env ? env : STREAMBP_SOURCE_DIR;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace sbp::test
