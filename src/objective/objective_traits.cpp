#include "objective/objective_traits.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace sbp {

// The objectives' own rows, each defined in its objective's file (sft.cpp, dpo.cpp, ...).
extern const ObjectiveTraits kSftTraits, kDpoTraits, kGrpoTraits, kPpoTraits, kOrpoTraits,
    kKtoTraits, kSimpoTraits;

namespace {

// The registry: one entry per objective, in enum order (checked below).
const ObjectiveTraits* const kObjectives[] = {&kSftTraits,  &kDpoTraits, &kGrpoTraits,
                                              &kPpoTraits,  &kOrpoTraits, &kKtoTraits,
                                              &kSimpoTraits};

}  // namespace

std::span<const ObjectiveTraits* const> all_objectives() { return kObjectives; }

const ObjectiveTraits& objective_traits(ObjectiveKind kind) {
  const size_t i = static_cast<size_t>(kind);
  SBP_CHECK(i < std::size(kObjectives) && kObjectives[i]->kind == kind,
            "objective_traits: the registry is not in enum order");
  return *kObjectives[i];
}

std::span<const EnumName<ObjectiveKind>> objective_names() {
  static const std::vector<EnumName<ObjectiveKind>> names = [] {
    std::vector<EnumName<ObjectiveKind>> n;
    for (const ObjectiveTraits* t : kObjectives) n.push_back({t->kind, t->name});
    return n;
  }();
  return names;
}

ObjectiveKind parse_objective(const std::string& name) {
  return parse_enum<ObjectiveKind>(objective_names(), name, "objective");
}

const char* objective_name(ObjectiveKind k) { return objective_traits(k).name; }

int64_t group_size_of(const ObjectiveTraits& t, int64_t configured, int64_t sequences) {
  switch (t.group) {
    case SequenceGroup::one: return 1;
    case SequenceGroup::pair: return 2;
    case SequenceGroup::configured: return std::clamp<int64_t>(configured, 1, sequences);
  }
  return 1;
}

int64_t plan_sequences_of(const ObjectiveTraits& t, int64_t configured) {
  return t.plan_sequences > 0 ? t.plan_sequences : std::max<int64_t>(1, configured);
}

bool accepts_format(const ObjectiveTraits& t, const char* format_name) {
  return std::any_of(t.formats.begin(), t.formats.end(),
                     [&](const char* f) { return std::strcmp(f, format_name) == 0; });
}

}  // namespace sbp
