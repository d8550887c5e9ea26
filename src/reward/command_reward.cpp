#include "reward/command_reward.h"
#include "reward/reward_protocol.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>

extern char** environ;

namespace sbp {

namespace {

constexpr size_t kMaxAnswerBytes = size_t{1} << 20;

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "stopped";
}

// The program runs with one end of a socket pair as both stdin and stdout. A socket rather
// than two pipes: send() with MSG_NOSIGNAL reports a dead reader as EPIPE instead of raising
// SIGPIPE, which would kill the trainer (and changing the process's signal disposition would be
// global state).
class CommandReward : public RewardFunction {
 public:
  CommandReward(std::vector<std::string> argv, double timeout_s)
      : argv_(std::move(argv)), timeout_s_(timeout_s) {
    label_ = "reward command '";
    for (size_t i = 0; i < argv_.size(); ++i) label_ += (i ? " " : "") + argv_[i];
    label_ += "'";
  }
  ~CommandReward() override { stop(/*graceful=*/true); }
  CommandReward(const CommandReward&) = delete;
  CommandReward& operator=(const CommandReward&) = delete;

  std::vector<double> score(std::span<const RewardRequest> requests) override {
    if (failed_) throw RewardError(label_ + " failed earlier: " + failure_);
    if (pid_ <= 0) start();
    std::vector<double> out;
    out.reserve(requests.size());
    for (const RewardRequest& r : requests) out.push_back(ask(r));
    return out;
  }

 private:
  void start() {
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
      fail("cannot create its socket: " + std::string(std::strerror(errno)), false);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    // dup2 clears close-on-exec on the copies, so the child keeps fd 0 and 1 only.
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    std::vector<char*> args;
    for (std::string& a : argv_) args.push_back(a.data());
    args.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    if (rc != 0) {
      close(fds[0]);
      fail("cannot be started: " + std::string(std::strerror(rc)), false);
    }
    pid_ = pid;
    fd_ = fds[0];
  }

  double ask(const RewardRequest& r) {
    nlohmann::json req = (r.fields && r.fields->is_object()) ? *r.fields : nlohmann::json::object();
    req["prompt"] = r.prompt;
    req["completion"] = r.completion;
    req["completion_tokens"] = r.completion_tokens;
    req["truncated"] = r.truncated;
    // Completions may end inside a UTF-8 sequence: replace invalid bytes instead of throwing.
    send_all(req.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    const std::string line = read_line();
    const RewardAnswer answer = parse_reward_answer(line);
    if (!answer.error.empty()) fail(answer.error + ": " + excerpt(line), true);
    return answer.reward;
  }

  void send_all(const std::string& data) {
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail_dead("stopped reading its requests (" + std::string(std::strerror(errno)) + ")");
      done += static_cast<size_t>(n);
    }
  }

  // One answer line (without its '\n'), within timeout_s.
  std::string read_line() {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(timeout_s_));
    for (;;) {
      const size_t newline = buffer_.find('\n');
      if (newline != std::string::npos) {
        std::string line = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        return line;
      }
      if (buffer_.size() > kMaxAnswerBytes)
        fail("answered a line longer than 1 MiB: " + excerpt(buffer_), true);
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) fail(timeout_message(), true);
      pollfd p{fd_, POLLIN, 0};
      const int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30)));
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0) fail("cannot be read: " + std::string(std::strerror(errno)), true);
      if (ready == 0) fail(timeout_message(), true);
      char chunk[65536];
      const ssize_t n = recv(fd_, chunk, sizeof chunk, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("cannot be read: " + std::string(std::strerror(errno)), true);
      if (n == 0) fail_dead("closed its output without answering");
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  std::string timeout_message() const {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", timeout_s_);
    return std::string("did not answer within reward_timeout (") + buf + " s)";
  }

  static std::string excerpt(const std::string& s) {
    return s.size() <= 200 ? "'" + s + "'" : "'" + s.substr(0, 200) + "...' (" +
                                                 std::to_string(s.size()) + " bytes)";
  }

  // The program went away: say how, from its exit status.
  [[noreturn]] void fail_dead(const std::string& what) {
    int status = 0;
    pid_t done = 0;
    // It may still be exiting: give it a moment before calling it alive.
    for (int i = 0; i < 50 && done == 0; ++i) {
      done = waitpid(pid_, &status, WNOHANG);
      if (done == 0) usleep(10000);
    }
    if (done == pid_) {
      pid_ = 0;
      fail(what + ": it " + describe_status(status), true);
    }
    fail(what, true);
  }

  [[noreturn]] void fail(const std::string& why, bool running) {
    failed_ = true;
    failure_ = why;
    if (running) stop(/*graceful=*/false);
    throw RewardError(label_ + " " + why);
  }

  // Closes the socket and reaps the program: graceful gives it 2 s to exit on end of input.
  void stop(bool graceful) {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    if (pid_ <= 0) return;
    int status = 0;
    if (graceful) {
      for (int i = 0; i < 200; ++i) {
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = 0;
          return;
        }
        usleep(10000);
      }
    }
    kill(pid_, SIGKILL);
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = 0;
  }

  std::vector<std::string> argv_;
  double timeout_s_;
  std::string label_;
  pid_t pid_ = 0;
  int fd_ = -1;
  std::string buffer_;
  bool failed_ = false;
  std::string failure_;
};

}  // namespace

std::unique_ptr<RewardFunction> make_command_reward(std::vector<std::string> argv,
                                                    double timeout_s) {
  return std::make_unique<CommandReward>(std::move(argv), timeout_s);
}

}  // namespace sbp
