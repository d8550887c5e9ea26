// The objective tables (objective/objective_traits.h, step/objective_steps.h): every objective
// has its row in both registries, in enum order, and its name parses back to it. A new
// objective whose rows are missing fails here before any command reaches it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/records.h"
#include "objective/objective_setup.h"
#include "step/objective_steps.h"

namespace sbp {
namespace {

TEST(ObjectiveRegistry, EveryObjectiveHasBothRowsAndItsNameParsesBack) {
  ASSERT_FALSE(all_objectives().empty());
  for (const ObjectiveTraits* t : all_objectives()) {
    EXPECT_EQ(&objective_traits(t->kind), t) << t->name;
    EXPECT_EQ(parse_objective(t->name), t->kind) << t->name;
    EXPECT_STREQ(objective_name(t->kind), t->name);
    const ObjectiveStep& step = objective_step(t->kind);
    EXPECT_EQ(step.kind, t->kind) << t->name;
    EXPECT_NE(step.run, nullptr) << t->name;
    ASSERT_NE(t->needs_reference, nullptr) << t->name;
    ASSERT_NE(t->describe, nullptr) << t->name;
    ObjectiveSetup s;
    s.kind = t->kind;
    EXPECT_EQ(s.describe().rfind(t->name, 0), 0u) << s.describe();
  }
  EXPECT_THROW(parse_objective("nope"), InputError);
}

// Every format an objective names is a data format the reader knows, and each format trains
// exactly the objectives that list it.
TEST(ObjectiveRegistry, FormatsAreDataFormats) {
  for (const ObjectiveTraits* t : all_objectives()) {
    EXPECT_FALSE(t->formats.empty()) << t->name;
    for (const char* f : t->formats) {
      bool known = false;
      for (const EnumName<DataFormat>& e : kDataFormatNames) known |= std::strcmp(e.name, f) == 0;
      EXPECT_TRUE(known) << t->name << ": " << f;
    }
  }
}

// Every setting row (objective/objective_settings.h) is a key of its own objective's section,
// once; a number's default lies within its bound and a closed set's spelling parses back; the
// model directories are <name>.reference (one at most) and <name>.value_model (exactly for an
// objective with a value model); --beta names at most one number row per objective.
TEST(ObjectiveRegistry, SettingRowsBelongToTheirObjective) {
  std::vector<std::string> keys;
  for (const ObjectiveTraits* t : all_objectives()) {
    const std::string section = std::string(t->name) + ".";
    int references = 0, value_models = 0, beta_flags = 0;
    for (const ObjectiveSetting& row : t->settings) {
      const std::string key = row.key;
      EXPECT_EQ(key.rfind(section, 0), 0u) << key;
      EXPECT_EQ(std::count(keys.begin(), keys.end(), key), 0) << key;
      keys.push_back(key);
      ObjectiveSetup s;
      switch (row.type) {
        case SettingType::number:
          ASSERT_NE(row.number, nullptr) << key;
          EXPECT_TRUE(within(row.bound, row.number(s))) << key;
          if (row.beta_flag_default) {
            EXPECT_TRUE(within(row.bound, *row.beta_flag_default)) << key;
          }
          break;
        case SettingType::choice:
          ASSERT_TRUE(row.choose && row.chosen && row.choices) << key;
          EXPECT_TRUE(row.choose(s, row.chosen(s))) << key;
          EXPECT_FALSE(row.choose(s, "nope")) << key;
          EXPECT_NE(row.choices().find(row.chosen(s)), std::string::npos) << key;
          break;
        case SettingType::reference_dir:
          EXPECT_EQ(key, section + "reference");
          ++references;
          break;
        case SettingType::value_model_dir:
          EXPECT_EQ(key, section + "value_model");
          ++value_models;
          break;
      }
      if (row.beta_flag) {
        EXPECT_EQ(row.type, SettingType::number) << key;
        ++beta_flags;
      }
    }
    EXPECT_LE(references, 1) << t->name;
    EXPECT_EQ(value_models, t->value_model ? 1 : 0) << t->name;
    EXPECT_LE(beta_flags, 1) << t->name;
  }
}

TEST(ObjectiveRegistry, SettingBoundsSayWhatTheyAllow) {
  EXPECT_EQ(bound_text(kPositive), "must be positive");
  EXPECT_EQ(bound_text(kNonNegative), "must be >= 0");
  EXPECT_EQ(bound_text(kUnitInterval), "must be in [0, 1]");
  EXPECT_EQ(bound_text({.lo = 0.0, .hi = 0.5, .hi_open = true}), "must be in [0, 0.5)");
  EXPECT_FALSE(within(kPositive, 0.0));
  EXPECT_TRUE(within(kNonNegative, 0.0));
  EXPECT_FALSE(within(kUnitInterval, std::nan("")));
  EXPECT_FALSE(within({.lo = 0.0, .hi = 0.5, .hi_open = true}, 0.5));
}

// Objectives without a held-out loss are exactly those trained on rollouts.
TEST(ObjectiveRegistry, RolloutObjectivesHaveNoHeldOutLoss) {
  for (const ObjectiveTraits* t : all_objectives())
    EXPECT_EQ(objective_step(t->kind).evaluate == nullptr, t->rollouts) << t->name;
}

}  // namespace
}  // namespace sbp
