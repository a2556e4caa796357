// Pure mode (CompileOptions::pure): a call whose arguments pass the guards of a graph that an
// earlier call captured runs that graph without calling the function. A captured call teaches
// a plan: which graph it ran, where each graph input comes from (an argument, a view of one, or
// a tensor the function captured) and which graph output (and view of it) each result is.
#include <iostream>

#include "capture/tracer.h"
#include "core/stack_tensors.h"

namespace kiln {

namespace detail {

// How one call's graph runs without the function.
struct PurePlan {
  std::shared_ptr<capture::CacheEntry> entry;
  uint64_t generation = 0;
  std::string key;  // the non-tensor arguments' bytes
  struct Arg {
    bool defined = false;
    TensorMeta meta;
  };
  std::vector<Arg> args;
  struct Input {
    int arg = -1;           // the argument it is (or is a view of); -1: captured
    bool whole_arg = true;  // the argument itself, not a view of its memory
    Tensor captured;        // a tensor the function captured (arg == -1)
    TensorMeta meta;        // its metadata (a view's sizes, strides; offset relative to the arg)
  };
  std::vector<Input> inputs;
  struct Result {
    int output = 0;  // the graph output whose memory it is
    bool whole = true;
    TensorMeta meta;  // a view's sizes, strides, offset relative to the output
  };
  std::vector<Result> results;
  std::shared_ptr<const void> result_layout;  // the front end's, from learn_pure
};

}  // namespace detail

namespace capture {

namespace {

// As graph inputs are guarded: the storage offset is not (ir::same_guarded_meta).
bool same_meta(const Tensor& t, const TensorMeta& m) {
  const TensorImpl& i = *t.impl();
  return i.dtype() == m.dtype && i.requires_grad() == m.requires_grad && i.sizes() == m.sizes &&
         i.strides() == m.strides;
}

bool args_pass(const detail::PurePlan& plan, const detail::PureArgs& args) {
  if (plan.key != args.key || plan.args.size() != args.tensors.size()) return false;
  for (size_t j = 0; j < plan.args.size(); ++j) {
    const Tensor& t = *args.tensors[j];
    if (t.defined() != plan.args[j].defined) return false;
    if (t.defined() && (t.impl()->is_pending() || !same_meta(t, plan.args[j].meta))) return false;
  }
  for (const detail::PurePlan::Input& in : plan.inputs)
    if (in.arg < 0 && !same_meta(in.captured, in.meta)) return false;
  return true;
}

// A view of `base`'s memory with `meta`'s sizes and strides, at `meta`'s offset from base's.
Tensor view_of(const Tensor& base, const TensorMeta& meta) {
  return Tensor(std::make_shared<TensorImpl>(base.impl()->storage_if_concrete(),
                                             base.storage_offset() + meta.storage_offset,
                                             meta.sizes, meta.strides, meta.dtype));
}

// Where the memory of `t` is found among `candidates`: the index, or -1.
int same_memory(const Tensor& t, std::span<const Tensor> candidates) {
  for (size_t k = 0; k < candidates.size(); ++k)
    if (candidates[k].impl()->storage_if_concrete() == t.impl()->storage_if_concrete())
      return static_cast<int>(k);
  return -1;
}

TensorMeta relative_meta(const Tensor& t, const Tensor& base) {
  TensorMeta m = TensorMeta::of(t);
  m.storage_offset = t.storage_offset() - base.storage_offset();
  return m;
}

// The plan for the observed call, or why there is none.
std::shared_ptr<detail::PurePlan> make_plan(const PureObservation& obs,
                                            const detail::PureArgs& args,
                                            const std::vector<const Tensor*>* results,
                                            std::string& why) {
  if (args.unsupported >= 0) {
    why = detail::concat("argument ", args.unsupported,
                         " has a type pure mode cannot guard (it guards Tensor, "
                         "std::vector<Tensor>, numbers, bools, enums and strings; from Python: "
                         "tensors, None, numbers, strings, and tuples and lists of them)");
    return nullptr;
  }
  if (!results) {
    why =
        "its result type is not one pure mode can rebuild (void, Tensor, "
        "std::vector<Tensor>, a pair or tuple of Tensors; from Python: a tensor, None, or "
        "tuples and lists of them)";
    return nullptr;
  }
  if (obs.breaks > 0) {
    why = detail::concat("it has ", obs.breaks, " graph break(s): the code at a break must run");
    return nullptr;
  }
  if (obs.segments == 0) {
    why = "it recorded no graph (no tensor op ran)";
    return nullptr;
  }
  if (obs.wrote) {
    why = "it writes into a tensor in place (a side effect)";
    return nullptr;
  }
  if (!obs.entry) {
    why = "its graph ran eagerly (cache_size_limit, the stance or frozen mode)";
    return nullptr;
  }
  if (!obs.entry->graph.runtime_attrs.empty()) {
    why = "it draws random numbers (each call must advance the generator)";
    return nullptr;
  }
  auto plan = std::make_shared<detail::PurePlan>();
  plan->entry = obs.entry;
  plan->generation = obs.generation;
  plan->key = args.key;
  std::vector<Tensor> arg_tensors;
  for (const Tensor* t : args.tensors) {
    plan->args.push_back({t->defined(), t->defined() ? TensorMeta::of(*t) : TensorMeta()});
    arg_tensors.push_back(*t);
  }
  for (const Tensor& in : obs.inputs) {
    if (is_grad_enabled() && in.requires_grad()) {
      why = "an input requires grad and grad mode is on (the graph's results need autograd)";
      return nullptr;
    }
    detail::PurePlan::Input spec;
    for (size_t j = 0; j < arg_tensors.size() && spec.arg < 0; ++j)
      if (arg_tensors[j].defined() && arg_tensors[j].impl() == in.impl())
        spec.arg = static_cast<int>(j);
    if (spec.arg < 0)
      for (size_t j = 0; j < arg_tensors.size() && spec.arg < 0; ++j)
        if (arg_tensors[j].defined() &&
            arg_tensors[j].impl()->storage_if_concrete() == in.impl()->storage_if_concrete()) {
          spec.arg = static_cast<int>(j);
          spec.whole_arg = false;
        }
    if (spec.arg < 0) {
      spec.captured = in;
      spec.meta = TensorMeta::of(in);
    } else if (!spec.whole_arg) {
      spec.meta = relative_meta(in, arg_tensors[static_cast<size_t>(spec.arg)]);
    }
    plan->inputs.push_back(std::move(spec));
  }
  for (size_t i = 0; i < results->size(); ++i) {
    const Tensor& r = *(*results)[i];
    const int k = r.defined() ? same_memory(r, obs.outputs) : -1;
    if (k < 0) {
      why = detail::concat("result ", i,
                           " is not computed by the graph (an argument, a captured tensor or an "
                           "undefined tensor)");
      return nullptr;
    }
    const Tensor& out = obs.outputs[static_cast<size_t>(k)];
    detail::PurePlan::Result spec{k, true, relative_meta(r, out)};
    spec.whole = spec.meta == relative_meta(out, out);
    plan->results.push_back(std::move(spec));
  }
  return plan;
}

// Why `plan` (learned now) differs from `ran` (what pure mode would have run), or "".
std::string plan_difference(const detail::PurePlan& plan, const detail::PurePlan& ran) {
  if (plan.entry != ran.entry) {
    const std::string d = ir::describe_difference(ran.entry->graph, plan.entry->graph);
    return d.empty() ? "the captured graph differs" : "the captured graph differs: " + d;
  }
  if (plan.inputs.size() != ran.inputs.size()) return "the graph reads other tensors";
  for (size_t i = 0; i < plan.inputs.size(); ++i) {
    const auto &a = plan.inputs[i], &b = ran.inputs[i];
    if (a.arg != b.arg || a.whole_arg != b.whole_arg || a.meta != b.meta ||
        (a.arg < 0 && a.captured.impl() != b.captured.impl()))
      return detail::concat("graph input ", i, " comes from another tensor");
  }
  if (plan.results.size() != ran.results.size()) return "it returns another number of tensors";
  for (size_t i = 0; i < plan.results.size(); ++i)
    if (plan.results[i].output != ran.results[i].output ||
        plan.results[i].meta != ran.results[i].meta)
      return detail::concat("result ", i, " is another tensor of the graph");
  return "";
}

constexpr size_t kMaxPurePlans = 8;

}  // namespace

}  // namespace capture

namespace detail {

bool is_pure(const CompiledState& state) { return state.options.pure; }

PureStep pure_try_run(CompiledState& st, const PureArgs& args, std::vector<Tensor>& results,
                      std::shared_ptr<const PurePlan>& verify,
                      std::shared_ptr<const void>* result_layout) {
  // (Frozen mode allows a hit: a plan only runs a cached graph.)
  if (!capture::frames().empty() || stance() == Stance::ForceEager || st.run_eagerly)
    return PureStep::Capture;  // inside another capture or an eager region, or eager by policy
  std::shared_ptr<const PurePlan> plan;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    for (const auto& p : st.pure_plans)
      if (p->generation == st.generation.load() && capture::args_pass(*p, args)) {
        plan = p;
        break;
      }
    if (!plan) return PureStep::Capture;
    ++st.pure_hits;
    if (st.options.pure_verify_every > 0 && st.pure_hits % st.options.pure_verify_every == 0) {
      verify = plan;
      return PureStep::Verify;
    }
  }
  StackTensors<8> inputs(plan->inputs.size());  // (this runs on every hit)
  for (size_t i = 0; i < inputs.size(); ++i) {
    const PurePlan::Input& in = plan->inputs[i];
    if (in.arg < 0)
      inputs[i] = in.captured;
    else if (in.whole_arg)
      inputs[i] = *args.tensors[static_cast<size_t>(in.arg)];
    else
      inputs[i] = capture::view_of(*args.tensors[static_cast<size_t>(in.arg)], in.meta);
  }
  std::vector<Tensor> outs;
  {
    capture::InBackend in_backend;  // is_compiling() is true while the graph runs
    AutoGradMode no_grad(false);
    outs = plan->entry->plain()(inputs.span(), {});
  }
  capture::check_backend_outputs(st, plan->entry->graph, inputs.span(), outs);
  if (result_layout) *result_layout = plan->result_layout;
  // (Results that are the graph's outputs, whole and in order, are that list as it is.)
  bool outputs_as_they_are = plan->results.size() == outs.size();
  for (size_t i = 0; i < plan->results.size() && outputs_as_they_are; ++i)
    outputs_as_they_are = plan->results[i].whole && plan->results[i].output == static_cast<int>(i);
  if (outputs_as_they_are) {
    results = std::move(outs);
    return PureStep::Run;
  }
  results.clear();
  results.reserve(plan->results.size());
  for (const PurePlan::Result& r : plan->results) {
    const Tensor& out = outs[static_cast<size_t>(r.output)];
    results.push_back(r.whole ? out : capture::view_of(out, r.meta));
  }
  return PureStep::Run;
}

void CallScope::learn_pure(const PureArgs& args, const std::vector<const Tensor*>* results,
                           const std::shared_ptr<const PurePlan>& verify,
                           std::shared_ptr<const void> result_layout) {
  if (!pure_) return;  // the call was not captured (nested, eager region, stance)
  std::string why;
  std::shared_ptr<PurePlan> plan = capture::make_plan(*pure_, args, results, why);
  if (plan) plan->result_layout = std::move(result_layout);
  CompiledState& st = *state_;
  if (verify) {
    const std::string difference = plan ? capture::plan_difference(*plan, *verify)
                                        : "it can no longer run without the function: " + why;
    KILN_CHECK(difference.empty(), Error, "kiln::compile(pure=true) of '", st.name,
               "': verification (pure_verify_every = ", st.options.pure_verify_every,
               ") found that the function is not pure: called again with arguments that pass "
               "the guards, ",
               difference,
               ". Pure mode would have run the old graph without calling it; drop pure=true "
               "or make the function depend only on its arguments' shapes and dtypes");
    return;
  }
  std::lock_guard<std::mutex> lock(st.mu);
  if (!plan) {
    if (!st.warned_pure) {
      st.warned_pure = true;
      std::cerr << "[kiln] warning: '" << st.name << "' is compiled with pure=true, but " << why
                << "; such calls run the function and capture as without pure mode\n";
    }
    return;
  }
  st.pure_plans.insert(st.pure_plans.begin(), std::move(plan));
  if (st.pure_plans.size() > capture::kMaxPurePlans) st.pure_plans.pop_back();
}

}  // namespace detail

}  // namespace kiln
