#include "model/parameter_id.h"

#include <charconv>
#include <string_view>

#include "core/error.h"

namespace sbp {

namespace {

// One row a role: how Hugging Face spells it and what it is. A layer role's name is
// "model.layers.<l>." + [parent "."] + module "." + ("bias" | "weight"); the others'
// [parent "."] + module "." + "weight".
struct RoleRow {
  ParamRole role;
  ParamGroup group;
  ParamKind kind;
  const char* parent;    // "self_attn", "mlp", "model", or none
  const char* module;    // plain layout; none: the role exists only with sandwich norms
  const char* sandwich;  // with sandwich norms, where it differs
};

using R = ParamRole;
using G = ParamGroup;
using K = ParamKind;
constexpr RoleRow kRoles[] = {
    {R::embed, G::embedding, K::matrix, "model", "embed_tokens", nullptr},
    {R::final_norm, G::head, K::norm, "model", "norm", nullptr},
    {R::lm_head, G::head, K::matrix, nullptr, "lm_head", nullptr},
    {R::score, G::head, K::matrix, nullptr, "score", nullptr},
    {R::input_norm, G::layer, K::norm, nullptr, "input_layernorm", nullptr},
    {R::q_proj, G::layer, K::matrix, "self_attn", "q_proj", nullptr},
    {R::q_bias, G::layer, K::bias, "self_attn", "q_proj", nullptr},
    {R::k_proj, G::layer, K::matrix, "self_attn", "k_proj", nullptr},
    {R::k_bias, G::layer, K::bias, "self_attn", "k_proj", nullptr},
    {R::v_proj, G::layer, K::matrix, "self_attn", "v_proj", nullptr},
    {R::v_bias, G::layer, K::bias, "self_attn", "v_proj", nullptr},
    {R::o_proj, G::layer, K::matrix, "self_attn", "o_proj", nullptr},
    {R::o_bias, G::layer, K::bias, "self_attn", "o_proj", nullptr},
    {R::q_norm, G::layer, K::norm, "self_attn", "q_norm", nullptr},
    {R::k_norm, G::layer, K::norm, "self_attn", "k_norm", nullptr},
    {R::post_norm, G::layer, K::norm, nullptr, "post_attention_layernorm",
     "pre_feedforward_layernorm"},
    {R::attn_out_norm, G::layer, K::norm, nullptr, nullptr, "post_attention_layernorm"},
    {R::mlp_out_norm, G::layer, K::norm, nullptr, nullptr, "post_feedforward_layernorm"},
    {R::gate_proj, G::layer, K::matrix, "mlp", "gate_proj", nullptr},
    {R::up_proj, G::layer, K::matrix, "mlp", "up_proj", nullptr},
    {R::down_proj, G::layer, K::matrix, "mlp", "down_proj", nullptr},
};
static_assert(std::size(kRoles) == kParamRoles, "one row a role");

constexpr bool rows_in_role_order() {
  for (int i = 0; i < kParamRoles; ++i)
    if (static_cast<int>(kRoles[i].role) != i) return false;
  return true;
}
static_assert(rows_in_role_order(), "kRoles is indexed by the role");

const RoleRow& row(ParamRole role) { return kRoles[static_cast<size_t>(role)]; }

const char* module_in(const RoleRow& r, NormLayout layout) {
  return layout == NormLayout::sandwich && r.sandwich ? r.sandwich : r.module;
}

constexpr std::string_view kLayersPrefix = "model.layers.";

const char* leaf(const RoleRow& r) { return r.kind == ParamKind::bias ? ".bias" : ".weight"; }

// The module path without the "model.layers.<l>." of a layer role; empty if the layout has no
// such role.
std::string local_module(const RoleRow& r, NormLayout layout) {
  const char* module = module_in(r, layout);
  if (!module) return {};
  return r.parent ? std::string(r.parent) + "." + module : std::string(module);
}

// The same with the tensor's leaf: "self_attn.q_proj.bias".
std::string local_name(const RoleRow& r, NormLayout layout) {
  const std::string module = local_module(r, layout);
  return module.empty() ? module : module + leaf(r);
}

}  // namespace

ParamGroup ParamId::group() const { return row(role).group; }
ParamKind ParamId::kind() const { return row(role).kind; }

const char* hf_module_name(ParamRole role) {
  const RoleRow& r = row(role);
  return r.module ? r.module : r.sandwich;
}

std::string hf_module_path(const ParamId& id, NormLayout layout) {
  const RoleRow& r = row(id.role);
  const std::string local = local_module(r, layout);
  SBP_CHECK(!local.empty(), std::string("parameter role ") + hf_module_name(id.role) +
                                " exists only with sandwich norms");
  if (r.group == ParamGroup::layer)
    return std::string(kLayersPrefix) + std::to_string(id.layer) + "." + local;
  return local;
}

std::string hf_name(const ParamId& id, NormLayout layout) {
  return hf_module_path(id, layout) + leaf(row(id.role));
}

std::optional<int64_t> parse_layer_number(const std::string& digits) {
  if (digits.empty() || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  int64_t v = 0;
  const char* end = digits.data() + digits.size();
  const auto [ptr, ec] = std::from_chars(digits.data(), end, v);
  if (ec != std::errc() || ptr != end || v < 0) return std::nullopt;
  return v;
}

std::optional<ParamId> parse_hf_name(const std::string& name, NormLayout layout) {
  if (name.starts_with(kLayersPrefix)) {
    const size_t dot = name.find('.', kLayersPrefix.size());
    if (dot == std::string::npos) return std::nullopt;
    const auto layer =
        parse_layer_number(name.substr(kLayersPrefix.size(), dot - kLayersPrefix.size()));
    if (!layer) return std::nullopt;
    const std::string rest = name.substr(dot + 1);
    if (rest.empty()) return std::nullopt;  // local_name() of a role the layout has not
    for (const RoleRow& r : kRoles)
      if (r.group == ParamGroup::layer && local_name(r, layout) == rest)
        return layer_param(*layer, r.role);
    return std::nullopt;
  }
  for (const RoleRow& r : kRoles)
    if (r.group != ParamGroup::layer && local_name(r, layout) == name) return model_param(r.role);
  return std::nullopt;
}

}  // namespace sbp
