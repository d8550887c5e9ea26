// The objective tables (objective/objective_traits.h, step/objective_steps.h): every objective
// has its row in both registries, in enum order, and its name parses back to it. A new
// objective whose rows are missing fails here before any command reaches it.
#include <gtest/gtest.h>

#include <cstring>

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

// Objectives without a held-out loss are exactly those trained on rollouts.
TEST(ObjectiveRegistry, RolloutObjectivesHaveNoHeldOutLoss) {
  for (const ObjectiveTraits* t : all_objectives())
    EXPECT_EQ(objective_step(t->kind).evaluate == nullptr, t->rollouts) << t->name;
}

}  // namespace
}  // namespace sbp
