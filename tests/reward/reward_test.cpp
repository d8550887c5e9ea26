// Built-in rewards and the weighted RewardSet (reward/reward.h), and the `command` reward's
// protocol with small Python programs (tests/fixtures/reward/), its crash, timeout and garbage
// paths included.
#include "reward/reward.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <thread>

#include "support/test_support.h"
#include "core/stop_signal.h"

namespace sbp {
namespace {

RewardRequest request(std::string completion, const nlohmann::json* fields = nullptr,
                      int64_t tokens = 0, bool truncated = false) {
  RewardRequest r;
  r.prompt = "What is 6 * 7?";
  r.completion = std::move(completion);
  r.fields = fields;
  r.completion_tokens = tokens;
  r.truncated = truncated;
  return r;
}

std::vector<double> score_one(const RewardSpec& spec, const std::vector<RewardRequest>& reqs) {
  return make_reward(spec, "test")->score(reqs);
}

// A spec of `type` with the given fields set (designated initializers would warn under -Wextra
// for every field left at its default).
RewardSpec spec_of(const std::string& type, std::function<void(RewardSpec&)> set = {}) {
  RewardSpec s;
  s.type = parse_reward_type(type, "test");
  if (set) set(s);
  return s;
}

TEST(Rewards, AccuracyReadsTheRecordsAnswer) {
  const nlohmann::json fields = {{"answer", "42"}};
  const nlohmann::json numeric = {{"answer", 42}};
  const nlohmann::json other = {{"solution", "42"}};
  RewardSpec spec = spec_of("accuracy");
  EXPECT_EQ(score_one(spec, {request("6*7 = \\boxed{42}", &fields),
                             request("it is 41", &fields), request("#### 42.0", &numeric),
                             request("42", &other), request("42")}),
            (std::vector<double>{1, 0, 1, 0, 0}));
  spec.answer_field = "solution";
  EXPECT_EQ(score_one(spec, {request("42", &other)}), std::vector<double>{1});
}

TEST(Rewards, FormatSearchesWithDotAll) {
  RewardSpec spec = spec_of("format", [](RewardSpec& s) {
    s.pattern = "^<think>.*?</think>\\s*<answer>.*?</answer>$";
  });
  // Invalid UTF-8 (a cut sequence) is searched without error; no pattern matches across it.
  const std::string cut = "<think>\xE4\xBD</think><answer>1</answer>";
  EXPECT_EQ(score_one(spec, {request("<think>a\nb</think>\n<answer>42</answer>"),
                             request("<think>a</think> 42"),
                             request("x <think>a</think><answer>1</answer>"), request(cut)}),
            (std::vector<double>{1, 0, 0, 0}));
  spec.pattern = "answer";  // unanchored: anywhere, also beside invalid bytes
  EXPECT_EQ(score_one(spec, {request("the answer is"), request(cut)}),
            (std::vector<double>{1, 1}));
  spec.pattern = "(unclosed";
  EXPECT_THROW(
      {
        try {
          make_reward(spec, "config.yaml: rewards[0]");
        } catch (const InputError& e) {
          EXPECT_NE(std::string(e.what()).find("config.yaml: rewards[0].pattern"),
                    std::string::npos);
          throw;
        }
      },
      InputError);
}

TEST(Rewards, LengthIsDaposSoftOverlongPenalty) {
  RewardSpec spec = spec_of("length", [](RewardSpec& s) {
    s.max_length = 100;
    s.cache_length = 20;
  });
  EXPECT_EQ(score_one(spec, {request("", nullptr, 50), request("", nullptr, 80),
                             request("", nullptr, 90), request("", nullptr, 100),
                             request("", nullptr, 101), request("", nullptr, 60, true)}),
            (std::vector<double>{0, 0, -0.5, -1, -1, -1}));
  spec.cache_length = 0;
  EXPECT_THROW(make_reward(spec, "r"), InputError);
  spec.cache_length = 101;
  EXPECT_THROW(make_reward(spec, "r"), InputError);
}

TEST(Rewards, SetWeightsAndKeepsEachFunction) {
  const nlohmann::json fields = {{"answer", "42"}};
  RewardSet set({spec_of("accuracy", [](RewardSpec& s) { s.weight = 2.0; }),
                 spec_of("format",
                         [](RewardSpec& s) {
                           s.name = "tags";
                           s.weight = 0.5;
                           s.pattern = "^#";
                         })},
                "config.yaml: rewards");
  const RewardSet::Scores s =
      set.score(std::vector<RewardRequest>{request("#### 42", &fields), request("42?", &fields),
                                           request("# 7", &fields)});
  EXPECT_EQ(s.total, (std::vector<double>{2.5, 2.0, 0.5}));
  ASSERT_EQ(s.per_reward.size(), 2u);
  EXPECT_EQ(set.name(1), "tags");
  EXPECT_EQ(s.per_reward[1], (std::vector<double>{1, 0, 1}));
}

TEST(Rewards, BadSpecsNameTheirPlace) {
  auto message = [](std::vector<RewardSpec> specs) {
    try {
      RewardSet set(std::move(specs), "config.yaml: rewards");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_EQ(message({spec_of("accuracy"), spec_of("accuracy")}),
            "config.yaml: rewards[1]: a second reward named 'accuracy' (give each reward of the "
            "same type its own `name`)");
  // The type is parsed where a spec is read (a config file's rewards[i].type), naming its place.
  auto type_message = [](const std::string& type, const std::string& where) {
    try {
      parse_reward_type(type, where);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_EQ(type_message("bleu", "config.yaml: rewards[0]"),
            "config.yaml: rewards[0]: unknown reward type 'bleu' (known: accuracy, format, "
            "length, command, python)");
  EXPECT_EQ(message({spec_of("command")}),
            "config.yaml: rewards[0]: a command reward needs a command (program and arguments)");
  EXPECT_EQ(message({spec_of("accuracy", [](RewardSpec& s) { s.weight = NAN; })}),
            "config.yaml: rewards[0]: weight must be a finite number");
  EXPECT_EQ(message({}), "config.yaml: rewards: at least one reward is needed");
}

// The embedding program's function (the Python package's reward_funcs): the set calls the one
// function the spec holds, through every copy of the spec; a spec without one is a config
// file's, an error.
TEST(Rewards, PythonRewardIsTheEmbeddingProgramsFunction) {
  struct Counting : RewardFunction {
    int calls = 0;
    std::vector<double> score(std::span<const RewardRequest> requests) override {
      ++calls;
      std::vector<double> r;
      for (const RewardRequest& q : requests) r.push_back(static_cast<double>(q.completion.size()));
      return r;
    }
  };
  auto f = std::make_shared<Counting>();
  RewardSpec py = spec_of("python", [&](RewardSpec& s) {
    s.name = "chars";
    s.weight = 0.5;
    s.function = f;
  });
  const std::vector<RewardSpec> specs = {py, spec_of("format", [](RewardSpec& s) { s.pattern = "7"; })};
  RewardSet set(specs, "train(): rewards");
  const RewardSet::Scores s = set.score(std::vector<RewardRequest>{request("abcd"), request("7")});
  EXPECT_EQ(f->calls, 1);
  EXPECT_EQ(s.per_reward[0], (std::vector<double>{4, 1}));
  EXPECT_EQ(s.total, (std::vector<double>{2.0, 1.5}));
  EXPECT_EQ(reward_spec_json(py), (nlohmann::json{{"type", "python"}, {"name", "chars"}, {"weight", 0.5}}));
  try {
    RewardSet bad({spec_of("python")}, "config.yaml: rewards");
    ADD_FAILURE() << "a python reward without its function was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "config.yaml: rewards[0]: a python reward is a function given to streambp.train("
              "reward_funcs=...) in Python; a config file cannot hold one");
  }
}

// ---- the command reward ----

bool have_python() { return std::system("python3 -c 'import json' >/dev/null 2>&1") == 0; }

std::string fixture(const std::string& name) {
  return test::source_dir() + "/tests/fixtures/reward/" + name;
}

RewardSpec command(std::vector<std::string> argv, double timeout_s = 20.0) {
  RewardSpec s = spec_of("command");
  s.command = std::move(argv);
  s.timeout_s = timeout_s;
  return s;
}

TEST(CommandReward, AnswersEachRequestWithTheRecordsFields) {
  if (!have_python()) GTEST_SKIP() << "python3 is not installed (scripts/setup.sh installs it)";
  const nlohmann::json fields = {{"answer", "42"}, {"completion", "not this one"}};
  auto reward = make_reward(command({"python3", fixture("answer_reward.py")}), "r");
  // The request's own completion wins over a record field of the same name.
  const std::vector<double> r = reward->score(
      std::vector<RewardRequest>{request("it is 42", &fields, 3), request("it is 41", &fields, 5)});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_NEAR(r[0], 1.03, 1e-12);
  EXPECT_NEAR(r[1], 0.05, 1e-12);
  // The same program answers the next batch (started once per run).
  EXPECT_EQ(reward->score(std::vector<RewardRequest>{request("42!", &fields, 0)}),
            std::vector<double>{1.0});
}

std::string failure(const std::string& mode, double timeout_s = 20.0) {
  auto reward =
      make_reward(command({"python3", fixture("misbehaving_reward.py"), mode}, timeout_s), "r");
  const std::vector<RewardRequest> two = {request("a"), request("b")};
  try {
    reward->score(two);
  } catch (const RewardError& e) {
    // Once failed, it stays failed: no silent restart.
    try {
      reward->score(two);
      return "<second call succeeded>";
    } catch (const RewardError& again) {
      if (std::string(again.what()).find("failed earlier") == std::string::npos)
        return "<second call: " + std::string(again.what()) + ">";
    }
    return e.what();
  }
  return "<no error>";
}

TEST(CommandReward, FailuresStopWithTheirCause) {
  if (!have_python()) GTEST_SKIP() << "python3 is not installed (scripts/setup.sh installs it)";
  const std::string label = "reward command 'python3 " + fixture("misbehaving_reward.py");
  EXPECT_EQ(failure("crash"),
            label + " crash' closed its output without answering: it exited with status 3");
  EXPECT_EQ(failure("garbage"), label + " garbage' answered a line that is not JSON: 'reward = 1'");
  EXPECT_EQ(failure("noreward"),
            label + " noreward' answered without a numeric \"reward\": '{\"score\": 1}'");
  // A number past double's range is no JSON number to the parser: refused like any garbage.
  EXPECT_EQ(failure("inf"), label + " inf' answered a line that is not JSON: '{\"reward\": 1e999}'");
  EXPECT_NE(failure("huge").find("answered a line longer than 1 MiB"), std::string::npos);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(failure("hang", 1.0),
            label + " hang' did not answer within reward_timeout (1 s)");
  // Its stdin and stdout are one socket: closing stdout alone looks like a hang.
  EXPECT_EQ(failure("close", 1.0),
            label + " close' did not answer within reward_timeout (1 s)");
  // Both timeouts were honoured and the hung programs killed, not waited for (600 s sleeps).
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
}

TEST(CommandReward, AProgramThatCannotStart) {
  auto reward = make_reward(command({"/nonexistent/reward-program"}), "r");
  try {
    reward->score(std::vector<RewardRequest>{request("a")});
    FAIL() << "no error";
  } catch (const RewardError& e) {
    EXPECT_EQ(std::string(e.what()),
              "reward command '/nonexistent/reward-program' cannot be started: No such file or "
              "directory");
  }
}

// ---- issue 35: process groups, strict framing, exit status, stop signals ----

std::string hostile(const std::string& mode, const std::string& arg = "", double timeout_s = 20.0) {
  std::vector<std::string> argv = {"python3", fixture("hostile_reward.py"), mode};
  if (!arg.empty()) argv.push_back(arg);
  auto reward = make_reward(command(argv, timeout_s), "r");
  try {
    reward->score(std::vector<RewardRequest>{request("a"), request("b"), request("c")});
  } catch (const RewardError& e) {
    return e.what();
  }
  return "<no error>";
}

// A process is gone once it no longer exists or is a zombie waiting for init to reap it.
bool process_gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && line.size() > paren + 2 && line[paren + 2] == 'Z';
}

TEST(CommandReward, ExtraLinesAreRefusedNotTakenForLaterAnswers) {
  if (!have_python()) GTEST_SKIP() << "python3 is not installed (scripts/setup.sh installs it)";
  // Two answers to one request used to become the answers of two requests.
  const std::string twice = hostile("twice");
  EXPECT_NE(twice.find("one answer per request"), std::string::npos) << twice;
  EXPECT_NE(twice.find("'{\"reward\": 1.0}'"), std::string::npos) << twice;
  // 1000 lines before the first request used to answer the next 1000 requests.
  const std::string early = hostile("early");
  EXPECT_NE(early.find("one answer per request"), std::string::npos) << early;
}

TEST(CommandReward, AProgramThatExitsIsReportedByItsStatusAndStderr) {
  if (!have_python()) GTEST_SKIP() << "python3 is not installed (scripts/setup.sh installs it)";
  const std::string e = hostile("exit1");
  // It exits before reading the request: the socket resets, which is its exit, not a network
  // error ("Connection reset by peer" used to be all the message said).
  EXPECT_EQ(e.find("Connection reset"), std::string::npos) << e;
  EXPECT_NE(e.find("exited with status 1"), std::string::npos) << e;
  EXPECT_NE(e.find("ValueError: cannot load the grader"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;  // one line
}

TEST(CommandReward, ATimeoutKillsTheProgramsWholeProcessGroup) {
  if (!have_python()) GTEST_SKIP() << "python3 is not installed (scripts/setup.sh installs it)";
  test::TempDir tmp;
  const std::string pid_file = tmp.file("helper.pid");
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e = hostile("grandchild", pid_file, 2.0);
  EXPECT_NE(e.find("did not answer within reward_timeout (2 s)"), std::string::npos) << e;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  // The helper ignores SIGTERM and would sleep 600 s: SIGKILL to the group ended it too.
  std::ifstream in(pid_file);
  pid_t helper = 0;
  ASSERT_TRUE(in >> helper) << "the helper never started";
  bool gone = false;
  for (int i = 0; i < 200 && !(gone = process_gone(helper)); ++i) usleep(10000);
  EXPECT_TRUE(gone) << "helper " << helper << " outlived the timeout";
  if (!gone) kill(helper, SIGKILL);
}

TEST(CommandReward, AStopSignalEndsAPendingAnswerPromptly) {
  if (!have_python()) GTEST_SKIP() << "python3 is not installed (scripts/setup.sh installs it)";
  StopSignalScope scope;
  auto reward = make_reward(command({"python3", fixture("hostile_reward.py"), "hang"}, 600.0), "r");
  // SIGTERM to the process a second into the pending answer (as `kill` from a shell would).
  std::thread signaller([] {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    kill(getpid(), SIGTERM);
  });
  const auto t0 = std::chrono::steady_clock::now();
  std::string what = "<no error>";
  try {
    reward->score(std::vector<RewardRequest>{request("a"), request("b")});
  } catch (const RewardInterrupted& e) {
    what = e.what();
  } catch (const RewardError& e) {
    what = std::string("<RewardError> ") + e.what();
  }
  signaller.join();
  EXPECT_NE(what.find("was stopped: streambp received signal 15"), std::string::npos) << what;
  // Not the 600 s timeout.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
}


// ---- issue 54: an extra line is an error whenever it arrives ----

// finish() after the last score(): the program's input is closed and its output read to its
// end, so a line it writes late, or only at exit, is a framing error, not left unread.
std::string finish_error(const std::vector<std::string>& mode) {
  std::vector<std::string> argv = {"python3", fixture("late_line_reward.py")};
  argv.insert(argv.end(), mode.begin(), mode.end());
  auto reward = make_reward(command(argv, 20.0), "r");
  try {
    const std::vector<double> r =
        reward->score(std::vector<RewardRequest>{request("a"), request("b")});
    EXPECT_EQ(r.size(), 2u);
    reward->finish();
  } catch (const RewardError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(CommandReward, FinishReadsTheProgramsOutputToItsEnd) {
  if (!have_python()) GTEST_SKIP() << "python3 is not installed (scripts/setup.sh installs it)";
  StopSignalScope scope;  // a fresh stop flag: an earlier test raised SIGTERM in this process
  for (const std::vector<std::string>& mode :
       {std::vector<std::string>{"at-exit"}, std::vector<std::string>{"after", "2"}}) {
    const std::string e = finish_error(mode);
    EXPECT_NE(e.find("found when its input was closed after the last request"),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("'{\"reward\": 1.0}'"), std::string::npos) << e;
  }
  // A program that keeps to the protocol finishes quietly, and finish() again does nothing.
  auto reward = make_reward(
      command({"python3", fixture("late_line_reward.py"), "after", "0"}, 20.0), "r");
  EXPECT_EQ(reward->score(std::vector<RewardRequest>{request("a")}).size(), 1u);
  EXPECT_NO_THROW(reward->finish());
  EXPECT_NO_THROW(reward->finish());
}

}  // namespace
}  // namespace sbp
