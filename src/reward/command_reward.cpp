#include "reward/command_reward.h"
#include "reward/reward_protocol.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/stop_signal.h"

extern char** environ;

namespace sbp {

namespace {

constexpr size_t kMaxAnswerBytes = size_t{1} << 20;
constexpr size_t kStderrTailBytes = 400;  // what a failure message quotes of the program's stderr
constexpr int kPollSliceMs = 100;         // how often a pending answer checks for SIGINT/SIGTERM
constexpr int kKillGraceMs = 500;         // SIGTERM to the group, then SIGKILL after this
constexpr double kExitGraceS = 2.0;       // end of input, then this long for the program to exit

using Clock = std::chrono::steady_clock;

// From waitid(): how the program ended.
std::string describe_exit(const siginfo_t& info) {
  if (info.si_code == CLD_EXITED) return "exited with status " + std::to_string(info.si_status);
  if (info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED) {
    const char* name = strsignal(info.si_status);
    return "was killed by signal " + std::to_string(info.si_status) +
           (name ? " (" + std::string(name) + ")" : std::string());
  }
  return "stopped";
}

int ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, kPollSliceMs));
}

bool is_gone(int err) { return err == ECONNRESET || err == EPIPE; }

// The program runs with one end of a socket pair as both stdin and stdout. A socket rather
// than two pipes: send() with MSG_NOSIGNAL reports a dead reader as EPIPE instead of raising
// SIGPIPE, which would kill the trainer (and changing the process's signal disposition would be
// global state). Its stderr is a pipe that is copied to the trainer's stderr as it comes, so a
// failure message can quote its last words.
//
// It runs in a process group of its own, killed as a group: a program that started helpers (a
// shell pipeline, a sandbox, a grader pool) leaves none behind when it times out or the run
// stops. Being outside the terminal's foreground group, Ctrl-C reaches only the trainer, which
// then stops the program itself.
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

  // A line written late (after the check that follows its request's answer) is either taken
  // for a later request's answer, which then leaves that answer over, or is still unread when
  // the run ends: either way the program wrote more lines than it was asked for. So at the end
  // its input is closed and its output read to its end: any byte left is a framing error,
  // whatever the timing. A program that does not exit on end of input is ended as before.
  void finish() override {
    if (failed_ || pid_ <= 0) return;  // never started, or failed and stopped already
    ::shutdown(fd_, SHUT_WR);          // end of input: a well-behaved program exits now
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(kExitGraceS));
    bool ended = false;  // its output reached its end: it is exiting
    for (;;) {
      if (!buffer_.empty()) {
        const size_t newline = buffer_.find('\n');
        fail("answered a request with more than one line (one answer per request; found when "
             "its input was closed after the last request): " +
                 excerpt(newline == std::string::npos ? buffer_ : buffer_.substr(0, newline)),
             true);
      }
      if (!wait_for(POLLIN, deadline)) break;  // still running after the grace: ended below
      char chunk[4096];
      const ssize_t n = recv(fd_, chunk, sizeof chunk, 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (n <= 0) {  // its end (or it is gone): nothing was left over
        ended = true;
        break;
      }
      buffer_.append(chunk, static_cast<size_t>(n));
    }
    // The grace to exit on end of input was given here already when it did not end.
    stop(/*graceful=*/ended);
  }

 private:
  void start() {
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
      fail("cannot create its socket: " + std::string(std::strerror(errno)), false);
    int err[2];
    if (pipe2(err, O_CLOEXEC) != 0) {
      close(fds[0]);
      close(fds[1]);
      fail("cannot create its stderr pipe: " + std::string(std::strerror(errno)), false);
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    // dup2 clears close-on-exec on the copies, so the child keeps fd 0, 1 and 2 only.
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);  // a group of its own, led by the program
    std::vector<char*> args;
    for (std::string& a : argv_) args.push_back(a.data());
    args.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    close(fds[1]);
    close(err[1]);
    if (rc != 0) {
      close(fds[0]);
      close(err[0]);
      fail("cannot be started: " + std::string(std::strerror(rc)), false);
    }
    pid_ = pid;
    fd_ = fds[0];
    err_fd_ = err[0];
    // Non-blocking: every wait is a poll with the reward's deadline and the stop flag.
    fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
    fcntl(err_fd_, F_SETFL, fcntl(err_fd_, F_GETFL) | O_NONBLOCK);
  }

  double ask(const RewardRequest& r) {
    nlohmann::json req = (r.fields && r.fields->is_object()) ? *r.fields : nlohmann::json::object();
    req["prompt"] = r.prompt;
    req["completion"] = r.completion;
    req["completion_tokens"] = r.completion_tokens;
    req["truncated"] = r.truncated;
    // Strict framing: a line is an answer only to the request just sent. Anything the program
    // wrote before it was asked would be taken for the answer of a later request.
    refuse_unasked_output("wrote a line before its request (one answer per request)");
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(timeout_s_));
    // Completions may end inside a UTF-8 sequence: replace invalid bytes instead of throwing.
    send_all(req.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", deadline);
    const std::string line = read_line(deadline);
    refuse_unasked_output("answered a request with more than one line (one answer per request)");
    const RewardAnswer answer = parse_reward_answer(line);
    if (!answer.error.empty()) fail(answer.error + ": " + excerpt(line), true);
    return answer.reward;
  }

  // Whatever is already readable without waiting, beyond the answer just taken, is an error.
  void refuse_unasked_output(const std::string& what) {
    char chunk[4096];
    const ssize_t n = recv(fd_, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n > 0) buffer_.append(chunk, static_cast<size_t>(n));
    if (buffer_.empty()) return;
    const size_t newline = buffer_.find('\n');
    fail(what + ": " + excerpt(newline == std::string::npos ? buffer_ : buffer_.substr(0, newline)),
         true);
  }

  // Waits until fd_ is ready for `events` or the deadline passes; copies the program's stderr
  // meanwhile and honours a stop signal. Returns false on timeout.
  bool wait_for(short events, Clock::time_point deadline) {
    for (;;) {
      if (stop_requested()) interrupted();
      if (Clock::now() >= deadline) return false;
      pollfd p[2] = {{fd_, events, 0}, {err_fd_, POLLIN, 0}};
      const int ready = poll(p, err_fd_ >= 0 ? 2 : 1, ms_until(deadline));
      if (ready < 0 && errno == EINTR) continue;  // poll is never restarted: the flag is checked
      if (ready < 0) fail("cannot be waited for: " + std::string(std::strerror(errno)), true);
      if (err_fd_ >= 0 && p[1].revents) copy_stderr();
      if (p[0].revents) return true;
    }
  }

  // Forwards what the program wrote to stderr, keeping its tail for failure messages.
  void copy_stderr() {
    char chunk[4096];
    for (;;) {
      const ssize_t n = read(err_fd_, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n == 0 || (n < 0 && errno != EAGAIN)) {
        close(err_fd_);
        err_fd_ = -1;
        return;
      }
      if (n < 0) return;
      for (ssize_t done = 0; done < n;) {
        const ssize_t w = write(STDERR_FILENO, chunk + done, static_cast<size_t>(n - done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;  // the trainer's stderr is gone: keep the tail anyway
        done += w;
      }
      stderr_tail_.append(chunk, static_cast<size_t>(n));
      if (stderr_tail_.size() > 4 * kStderrTailBytes)
        stderr_tail_.erase(0, stderr_tail_.size() - kStderrTailBytes);
    }
  }

  void send_all(const std::string& data, Clock::time_point deadline) {
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!wait_for(POLLOUT, deadline)) fail(timeout_message(), true);
        continue;
      }
      if (n < 0 && is_gone(errno)) fail_dead("stopped reading its requests");
      if (n < 0) fail("cannot be written to: " + std::string(std::strerror(errno)), true);
      done += static_cast<size_t>(n);
    }
  }

  // One answer line (without its '\n'), by the deadline.
  std::string read_line(Clock::time_point deadline) {
    for (;;) {
      const size_t newline = buffer_.find('\n');
      if (newline != std::string::npos) {
        std::string line = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        return line;
      }
      if (buffer_.size() > kMaxAnswerBytes)
        fail("answered a line longer than 1 MiB: " + excerpt(buffer_), true);
      if (!wait_for(POLLIN, deadline)) fail(timeout_message(), true);
      char chunk[65536];
      const ssize_t n = recv(fd_, chunk, sizeof chunk, 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      // A program that exits with our request unread resets the connection: that is its exit,
      // not a network error, and is reported as such.
      if (n == 0 || (n < 0 && is_gone(errno))) fail_dead("closed its output without answering");
      if (n < 0) fail("cannot be read: " + std::string(std::strerror(errno)), true);
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

  // The last lines of the program's stderr as one line ("" when it wrote nothing).
  std::string stderr_excerpt() const {
    std::string t = stderr_tail_;
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
    if (t.empty()) return "";
    const bool cut = t.size() > kStderrTailBytes;
    if (cut) t.erase(0, t.size() - kStderrTailBytes);
    for (char& c : t)
      if (c == '\n' || c == '\r') c = '|';
    return "; its stderr ended: '" + std::string(cut ? "..." : "") + t + "'";
  }

  // Whether the program has exited, without reaping it: while it is an unreaped zombie its pid,
  // which is also its group's id, cannot be reused, so killing the group never hits a stranger.
  bool leader_exited(siginfo_t* info) const {
    siginfo_t i{};
    if (waitid(P_PID, static_cast<id_t>(pid_), &i, WEXITED | WNOHANG | WNOWAIT) != 0) return false;
    if (info) *info = i;
    return i.si_pid == pid_;
  }

  // The program went away: say how, from its exit status, and what it last wrote to stderr.
  [[noreturn]] void fail_dead(const std::string& what) {
    siginfo_t info{};
    bool exited = false;
    // It may still be exiting: give it a moment before calling it alive.
    for (int i = 0; i < 50 && !(exited = leader_exited(&info)); ++i) usleep(10000);
    // Its stderr closes when it (and any helper holding it) is gone: take what is left.
    for (int i = 0; i < 20 && err_fd_ >= 0; ++i) {
      pollfd p{err_fd_, POLLIN, 0};
      if (poll(&p, 1, 10) > 0) copy_stderr();
    }
    fail(what + (exited ? ": it " + describe_exit(info) : std::string()) + stderr_excerpt(), true);
  }

  [[noreturn]] void fail(const std::string& why, bool running) {
    failed_ = true;
    failure_ = why;
    if (running) stop(/*graceful=*/false);
    throw RewardError(label_ + " " + why);
  }

  [[noreturn]] void interrupted() {
    const std::string why =
        "was stopped: streambp received signal " + std::to_string(stop_signal_number());
    failed_ = true;
    failure_ = why;
    stop(/*graceful=*/false);
    throw RewardInterrupted(label_ + " " + why);
  }

  // Closes the socket and ends the program's whole group: graceful first gives the program 2 s
  // to exit on end of input; then SIGTERM to the group, SIGKILL once the program has exited or
  // after a short grace (helpers it left in the group included), and the program is reaped.
  void stop(bool graceful) {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    if (pid_ > 0) {
      if (graceful)
        for (int i = 0; i < 200 && !leader_exited(nullptr); ++i) usleep(10000);
      kill(-pid_, SIGTERM);
      for (int i = 0; i < kKillGraceMs / 10 && !leader_exited(nullptr); ++i) usleep(10000);
      kill(-pid_, SIGKILL);
      int status = 0;
      while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      pid_ = 0;
    }
    close_stderr();
  }

  void close_stderr() {
    if (err_fd_ >= 0) close(err_fd_);
    err_fd_ = -1;
  }

  std::vector<std::string> argv_;
  double timeout_s_;
  std::string label_;
  pid_t pid_ = 0;  // the program and its process group's id, until reaped
  int fd_ = -1;
  int err_fd_ = -1;
  std::string buffer_;
  std::string stderr_tail_;
  bool failed_ = false;
  std::string failure_;
};

}  // namespace

std::unique_ptr<RewardFunction> make_command_reward(std::vector<std::string> argv,
                                                    double timeout_s) {
  return std::make_unique<CommandReward>(std::move(argv), timeout_s);
}

}  // namespace sbp
