// streambp._core: the Python package's view of the C++ library (python/streambp/ wraps it).
// Nothing here computes: plan, score and generate are the commands themselves, run on an
// argument list with their results handed back in memory (cli/run_cli.h); train is the
// trainer, with Python reward functions as one more reward type (reward/reward.h, "python")
// and a listener on the metrics lines. The GIL is released while C++ works and taken again
// only to call back into Python.
#include <malloc.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "cli/command_output.h"
#include "cli/commands.h"
#include "cli/run_cli.h"
#include "cli/run_config.h"
#include "core/error.h"
#include "data/data_source.h"
#include "reward/reward.h"
#include "train/trainer.h"

namespace nb = nanobind;

namespace {

// Text for Python: a completion cut inside a UTF-8 sequence gets U+FFFD, as in the command
// reward's JSON lines, instead of failing the reward.
nb::object utf8(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (!o) throw nb::python_error();
  return nb::steal(o);
}

// "ValueError: bad input": one line, as every error of the library (without the type's name:
// "bad input").
std::string one_line(const nb::python_error& e, bool with_type = true) {
  const std::string type = nb::str(e.type().attr("__name__")).c_str();
  const std::string text = nb::str(e.value()).c_str();
  std::string s = text.empty() ? type : with_type ? type + ": " + text : text;
  for (char& c : s)
    if (c == '\n') c = ' ';
  return s;
}

// A failure of a function of the Python program, in one line. The package's own checks of what
// the function returned (streambp._check) raise streambp.Error, whose message is already that
// line: no type name before it.
std::string failure_line(const nb::python_error& e) {
  return one_line(e, !e.matches(nb::module_::import_("streambp._core").attr("Error")));
}

// A reward function of the Python program, called in this process on each batch of completions
// through streambp._reward_call (python/streambp/_train.py), which builds TRL's keyword arguments.
// Failing as a command reward fails (reward/command_reward.h): an exception, a wrong count or a
// non-number is a RewardError naming the function; so is an answer slower than timeout_s (it
// cannot be cut short in-process: it is measured when it returns).
class PythonReward : public sbp::RewardFunction {
 public:
  // Borrowed handles: streambp.train() holds the objects for the run's length.
  PythonReward(nb::handle fn, nb::handle call, std::string name, double timeout_s)
      : fn_(fn), call_(call), name_(std::move(name)), timeout_s_(timeout_s) {}

  std::vector<double> score(std::span<const sbp::RewardRequest> requests) override {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<double> out;
    std::string failure;
    {
      nb::gil_scoped_acquire gil;
      try {
        nb::list prompts, completions, fields, tokens, truncated;
        for (const sbp::RewardRequest& r : requests) {
          prompts.append(utf8(r.prompt));
          completions.append(utf8(r.completion));
          fields.append(r.fields && r.fields->is_object() ? r.fields->dump() : std::string("{}"));
          tokens.append(r.completion_tokens);
          truncated.append(r.truncated);
        }
        nb::object got = call_(fn_, prompts, completions, fields, tokens, truncated);
        out = nb::cast<std::vector<double>>(got);
      } catch (nb::python_error& e) {
        failure = failure_line(e);
      } catch (const nb::cast_error&) {
        failure = "did not return a list of numbers";
      }
    }
    if (!failure.empty()) throw sbp::RewardError("reward '" + name_ + "': " + failure);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > timeout_s_)
      throw sbp::RewardError("reward '" + name_ + "': took " + std::to_string(s) +
                             " s for " + std::to_string(requests.size()) +
                             " completions, more than reward_timeout (" +
                             std::to_string(timeout_s_) + " s)");
    return out;
  }

 private:
  nb::handle fn_, call_;
  std::string name_;
  double timeout_s_;
};

// The command line, as the `streambp` program runs it (the wheel's console script).
int run_main(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  nb::gil_scoped_release nogil;
  return sbp::cli::run_cli(static_cast<int>(args.size()), argv.data());
}

// The flags of plan, score or generate as the command line defines them: (long name, whether it
// takes a value). streambp._check turns keyword arguments into flags by this table, so that an
// unknown keyword, a value for a switch or True for a flag with a value is refused by name
// before the command runs (a switch given False would otherwise be dropped without a word).
std::vector<std::pair<std::string, bool>> command_flags(const std::string& command) {
  sbp::cli::CommandOutput unused;
  CLI::App app{"streambp"};
  sbp::cli::register_score(app, &unused);
  sbp::cli::register_generate(app, &unused);
  sbp::cli::register_plan(app, &unused);
  const CLI::App* c = nullptr;
  try {
    c = app.get_subcommand(command);
  } catch (const CLI::OptionNotFound&) {
    throw sbp::Error(command + ": not one of plan, score, generate");
  }
  std::vector<std::pair<std::string, bool>> flags;
  for (const CLI::Option* o : c->get_options()) {
    if (o == c->get_help_ptr()) continue;
    for (const std::string& name : o->get_lnames())
      flags.emplace_back(name, o->get_expected_max() != 0);
  }
  return flags;
}

// plan / score / generate on `args` (score's sequences in `input_json`, generate's prompt
// records in `input_lines`, JSONL, when the arguments name no --input); returns (the JSON as
// text, [(name, float32 array)]).
std::pair<std::string, nb::list> run_command(const std::vector<std::string>& args,
                                             const std::string& input_json, bool grads,
                                             std::string input_lines) {
  sbp::cli::CommandOutput out;
  if (!input_json.empty()) out.input = nlohmann::json::parse(input_json);
  if (!input_lines.empty())
    out.input_lines = std::make_shared<const std::string>(std::move(input_lines));
  out.grads = grads;
  {
    nb::gil_scoped_release nogil;
    sbp::cli::run_command(args, out);
  }
  nb::list arrays;
  for (sbp::cli::OutputArray& a : out.arrays) {
    // The vector moves to the heap and the array's capsule frees it: no copy.
    auto* owned = new std::vector<float>(std::move(a.data));
    nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
    const std::vector<size_t> shape(a.shape.begin(), a.shape.end());
    nb::ndarray<nb::numpy, float> arr(owned->data(), shape.size(), shape.data(), owner);
    arrays.append(nb::make_tuple(a.name, arr.cast()));
  }
  // generate's completions may end inside a UTF-8 sequence: U+FFFD, as its JSONL lines write.
  return {out.json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), arrays};
}

// streambp.train(): the trainer on the config `positional` names (as `streambp train` takes it;
// `overrides_only`: a config given as a Python dict, all of it key=value overrides), with the
// records of `in_memory` (data.train / data.eval -> their JSONL lines, the keys' values set to
// in_memory_label() by the overrides) read from memory as the files would be,
// with the Python reward functions `rewards` (name, weight, function) added to the config's and
// `on_metrics` (None or a callable taking a JSON line) called with each metrics line. Returns the
// trainer's exit code (130 after SIGINT/SIGTERM, with a checkpoint saved). `on_config` (None or a
// callable) is given the resolved config as JSON (TrainConfig::to_json) before the run starts:
// streambp.train opens report_to's dashboards from it (python/streambp/_report.py).
int run_train(const std::vector<std::string>& positional, bool overrides_only,
              const std::string& resume,
              std::vector<std::pair<std::string, std::string>> in_memory,
              const std::vector<std::tuple<std::string, double, nb::object>>& rewards,
              nb::object reward_call, nb::object on_metrics, nb::object on_config) {
  sbp::TrainConfig cfg = overrides_only ? sbp::load_train_config("", positional)
                                        : sbp::cli::load_run_config(positional, resume);
  for (auto& [key, lines] : in_memory) {
    if (key != "data.train" && key != "data.eval") throw sbp::Error(key + ": not a data key");
    const std::string& value = key == "data.train" ? cfg.data_train : cfg.data_eval;
    if (value != sbp::in_memory_label(key))
      throw sbp::Error(key + ": records were given but the config names " + value);
    auto text = std::make_shared<const std::string>(std::move(lines));
    (key == "data.train" ? cfg.data_train_text : cfg.data_eval_text) = std::move(text);
  }
  for (const auto& [name, weight, fn] : rewards) {
    sbp::RewardSpec spec;
    spec.type = sbp::RewardType::python;
    spec.name = name;
    spec.weight = weight;
    spec.timeout_s = cfg.reward_timeout;
    spec.function = std::make_shared<PythonReward>(fn, reward_call, name, cfg.reward_timeout);
    // A resumed run's stored config names its Python rewards ({type: python, name}) without
    // their functions: the function of that name takes its place (and order); else it is added.
    bool placed = false;
    for (sbp::RewardSpec& r : cfg.rewards) {
      if (r.type == sbp::RewardType::python && r.name == name && !r.function) {
        r = spec;
        placed = true;
        break;
      }
    }
    if (!placed) cfg.rewards.push_back(std::move(spec));
  }
  if (!on_metrics.is_none()) {
    nb::handle listener = on_metrics;  // borrowed: train() holds it
    cfg.on_metrics = [listener](const nlohmann::ordered_json& line) {
      std::string failure;
      {
        nb::gil_scoped_acquire gil;
        try {
          listener(line.dump());
        } catch (nb::python_error& e) {
          failure = one_line(e);
        }
      }
      if (!failure.empty()) throw sbp::Error("callback: " + failure);
    };
  }
  if (!on_config.is_none()) on_config(cfg.to_json().dump());
  // cfg (and its Python handles) outlives the run; nothing of Python is touched without the GIL.
  nb::gil_scoped_release nogil;
  return sbp::run_training(cfg, resume);
}

}  // namespace

NB_MODULE(_core, m) {
  // As the program's main(): large buffers get their own mappings and go back to the system
  // when freed, so that the process's memory is what the ledger accounts for (cli/main.cpp).
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  // Every error of the library (bad input, a failed reward, a stopped run): its one-line message.
  nb::exception<sbp::Error>(m, "Error");
  m.def("main", &run_main, nb::arg("argv"),
        "Runs the streambp command line (argv[0] is the program's name); returns its exit code.");
  m.def("command", &run_command, nb::arg("args"), nb::arg("input_json") = "",
        nb::arg("grads") = false, nb::arg("input_lines") = "");
  m.def("command_flags", &command_flags, nb::arg("command"));
  m.def("train", &run_train, nb::arg("positional"), nb::arg("overrides_only"), nb::arg("resume"),
        nb::arg("in_memory"), nb::arg("rewards"),
        nb::arg("reward_call"), nb::arg("on_metrics").none(), nb::arg("on_config").none());
}
