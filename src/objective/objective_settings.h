#pragma once
// An objective's settings as a config file names them: one row per setting, declared in the
// objective's own file beside its traits row (ObjectiveTraits::settings), so that adding an
// objective, or a setting to one, touches only that objective's files. A row is a key
// ("kto.desirable_weight"; the Python keyword kto__desirable_weight) bound to its field of
// ObjectiveSetup (a number with its bound, or a closed set), or a model directory the trainer
// loads for the objective (its reference model, PPO's value model). train/config_keys.cpp makes
// every row a config key and checks its bound; cli/objective_args.cpp sets the row that --beta
// names.
//
//   constexpr ObjectiveSetting kKtoSettings[] = {
//       number_setting<&ObjectiveSetup::kto, &KtoConfig::beta>("kto.beta", kPositive, true),
//       ...
//       {.key = "kto.reference", .type = SettingType::reference_dir}};
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <type_traits>

#include "core/enum_names.h"

namespace sbp {

struct ObjectiveSetup;

enum class SettingType {
  number,           // a double of ObjectiveSetup, within `bound`
  choice,           // an enum of ObjectiveSetup, one of its spellings
  reference_dir,    // the directory of the objective's reference model ("" = the starting model)
  value_model_dir,  // the directory of its value model ("" = the starting model's trunk)
};
inline bool is_model_dir(SettingType t) {
  return t == SettingType::reference_dir || t == SettingType::value_model_dir;
}

// The interval a number must lie in. A config error says it the way the key table always has:
// "must be positive", "must be >= 0", "must be in [0, 1]", "must be in [0, 0.5)".
struct SettingBound {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
};
inline constexpr SettingBound kPositive{.lo = 0.0, .lo_open = true};
inline constexpr SettingBound kNonNegative{.lo = 0.0};
inline constexpr SettingBound kUnitInterval{.lo = 0.0, .hi = 1.0};

bool within(const SettingBound& b, double v);   // false for NaN
std::string bound_text(const SettingBound& b);  // "must be positive", ...

struct ObjectiveSetting {
  const char* key;  // "<objective>.<name>"
  SettingType type;
  // number: its field and bound. beta_flag: the command line's --beta sets it (gradcheck, bench,
  // plan: the objective's own coefficient), or when --beta is not given, beta_flag_default where
  // that differs from the config's default.
  double& (*number)(ObjectiveSetup& s) = nullptr;
  SettingBound bound = {};
  bool beta_flag = false;
  std::optional<double> beta_flag_default = {};
  // choice: sets it from a spelling (false: not one of them), its spelling, the spellings
  // ("sigmoid, hinge or ipo").
  bool (*choose)(ObjectiveSetup& s, const std::string& spelling) = nullptr;
  const char* (*chosen)(const ObjectiveSetup& s) = nullptr;
  std::string (*choices)() = nullptr;
};

// The field at the end of a path of members, (s.*Path[0]).*Path[1]... (&ObjectiveSetup::kto,
// &KtoConfig::beta): the rows' accessors below are instances of these, one per field, made where
// the rows are declared.
template <auto... Path>
auto& setting_field(ObjectiveSetup& s) {
  return (s .* ... .* Path);
}
template <auto... Path>
const auto& setting_field(const ObjectiveSetup& s) {
  return (s .* ... .* Path);
}

template <auto... Path>
double& setting_number(ObjectiveSetup& s) {
  return setting_field<Path...>(s);
}

// Names: the enum's table of spellings (core/enum_names.h), e.g. kDpoLossNames.
template <auto& Names>
using SettingEnum = std::remove_cvref_t<decltype(Names[0].value)>;

template <auto& Names, auto... Path>
bool setting_choose(ObjectiveSetup& s, const std::string& spelling) {
  return try_parse_enum<SettingEnum<Names>>(Names, spelling, &setting_field<Path...>(s));
}

template <auto& Names, auto... Path>
const char* setting_chosen(const ObjectiveSetup& s) {
  return enum_name<SettingEnum<Names>>(Names, setting_field<Path...>(s));
}

template <auto& Names>
std::string setting_choices() {
  return enum_choices<SettingEnum<Names>>(Names);
}

// A number row: number_setting<&ObjectiveSetup::dpo, &DpoConfig::beta>("dpo.beta", kPositive).
template <auto... Path>
constexpr ObjectiveSetting number_setting(const char* key, SettingBound bound,
                                          bool beta_flag = false,
                                          std::optional<double> beta_flag_default = {}) {
  return {.key = key,
          .type = SettingType::number,
          .number = setting_number<Path...>,
          .bound = bound,
          .beta_flag = beta_flag,
          .beta_flag_default = beta_flag_default};
}

// A closed-set row: choice_setting<kDpoLossNames, &ObjectiveSetup::dpo, &DpoConfig::loss_type>.
template <auto& Names, auto... Path>
constexpr ObjectiveSetting choice_setting(const char* key) {
  return {.key = key,
          .type = SettingType::choice,
          .choose = setting_choose<Names, Path...>,
          .chosen = setting_chosen<Names, Path...>,
          .choices = setting_choices<Names>};
}

}  // namespace sbp
