// allow_in_graph(name, fn): each allowed function is an Opaque op whose meta runs fn on
// metadata-only tensors, whose kernel calls fn, and whose derivative re-runs fn under autograd
// (written in ops, so a backward pass inside a capture records it too).
#include <map>
#include <mutex>

#include "capture/tracer.h"

namespace kiln::detail {

namespace {
std::mutex g_allowed_mu;
std::map<const OpDef*, AllowedBody>& allowed_bodies() {
  static auto* m = new std::map<const OpDef*, AllowedBody>();
  return *m;
}
const AllowedBody& body_of(const OpDef& op) {
  std::lock_guard<std::mutex> lock(g_allowed_mu);
  return allowed_bodies().at(&op);
}
std::string fn_name(const OpDef& op) { return std::string(op.name.substr(op.name.find('.') + 1)); }

std::shared_ptr<CompiledState> metadata_state() {
  static auto st = [] {
    CompileOptions o;
    o.name = "allow_in_graph metadata";
    return make_compiled_state(o, std::source_location::current());
  }();
  return st;
}

int allowed_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  // A throwaway capture: fn's ops record nodes that are never run.
  capture::Tracer tracer(metadata_state(), false);
  tracer.set_metadata_only(detail::concat("allow_in_graph('", fn_name(c.op), "')"));
  capture::frames().push_back({&tracer, false});
  InterceptorScope intercept(&tracer);
  struct Restore {
    capture::Tracer& t;
    ~Restore() {
      t.abandon("metadata-only run");
      capture::frames().pop_back();
    }
  } restore{tracer};
  std::vector<Tensor> symbolic;
  for (const Tensor& t : c.inputs) symbolic.push_back(tracer.symbolic_input(t));
  std::vector<Tensor> results;
  {
    AutoGradMode no_grad(false);
    results = body_of(c.op)(symbolic, c.attrs);
  }
  KILN_CHECK(results.size() <= static_cast<size_t>(kMaxOpOutputs), NotImplementedError,
             "allow_in_graph('", fn_name(c.op), "'): returns ", results.size(),
             " tensors; at most ", kMaxOpOutputs, " are supported");
  for (size_t i = 0; i < results.size(); ++i) {
    KILN_CHECK(results[i].defined(), Error, "allow_in_graph('", fn_name(c.op), "'): result ", i,
               " is an undefined tensor");
    out[i] = {results[i].dtype(), results[i].sizes()};
  }
  return static_cast<int>(results.size());
}

void allowed_kernel(const OpCall& c, std::span<Tensor> outs) {
  std::vector<Tensor> results = body_of(c.op)(c.inputs, c.attrs);
  KILN_CHECK(results.size() <= outs.size(), NotImplementedError, "allow_in_graph('", fn_name(c.op),
             "'): returns ", results.size(), " tensors; at most ", outs.size(), " are supported");
  for (size_t i = 0; i < results.size(); ++i) outs[i] = std::move(results[i]);
}

void allowed_derivative(const BackwardCall& c, std::span<Tensor> g) {
  std::vector<Tensor> ins, wrt;
  std::vector<size_t> wrt_index;
  KILN_CHECK(c.inputs.size() <= 32, NotImplementedError, "allow_in_graph('", fn_name(c.op),
             "'): gradients through a function with more than 32 tensor arguments (",
             c.inputs.size(), ") are not supported");
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    Tensor x = c.in(i).detach();
    if (c.needs_grad(i) && x.is_floating_point()) {
      x.requires_grad_();
      wrt.push_back(x);
      wrt_index.push_back(i);
    }
    ins.push_back(x);
  }
  const bool create_graph = is_grad_enabled();
  std::vector<Tensor> outs;
  {
    EnableGradGuard on;
    outs = body_of(c.op)(ins, c.attrs);
  }
  std::vector<Tensor> ys, gys;
  for (size_t k = 0; k < outs.size() && k < c.grads.size(); ++k)
    if (c.grads[k].defined() && outs[k].requires_grad()) {
      ys.push_back(outs[k]);
      gys.push_back(c.grads[k]);
    }
  if (ys.empty() || wrt.empty()) return;
  std::vector<Tensor> grads = kiln::grad(ys, wrt, gys, {}, create_graph, /*allow_unused=*/true);
  for (size_t j = 0; j < grads.size(); ++j) g[wrt_index[j]] = grads[j];
}
}  // namespace

const OpDef& register_allowed_function(const std::string& name, AllowedBody body) {
  KILN_CHECK(!name.empty(), ValueError, "allow_in_graph: the name is empty");
  const std::string op_name = "allow_in_graph." + name;
  KILN_CHECK(!find_op(op_name), ValueError, "allow_in_graph: a function named '", name,
             "' is already allowed in graphs; give each function its own name");
  // The registry keeps string_views: the name must outlive it.
  static std::mutex names_mu;
  static auto* names = new std::vector<std::unique_ptr<std::string>>();
  std::string_view stored_name;
  {
    std::lock_guard<std::mutex> lock(names_mu);
    names->push_back(std::make_unique<std::string>(op_name));
    stored_name = *names->back();
  }
  const OpDef& op =
      register_op({.name = stored_name,
                   .schema = "allow_in_graph(Tensor[] args, ...) -> Tensor[]",
                   .kind = OpKind::Opaque,
                   .attr_names = {"layout"},
                   .meta = allowed_meta,
                   .kernel = allowed_kernel,
                   .derivative = {.fn = allowed_derivative, .saved_inputs = 0xFFFFFFFFu}});
  std::lock_guard<std::mutex> lock(g_allowed_mu);
  allowed_bodies()[&op] = std::move(body);
  return op;
}

std::vector<Tensor> call_allowed_function(const OpDef& op, std::vector<Tensor> tensors,
                                          Attrs attrs) {
  if (!is_dynamo_compiling()) return body_of(op)(tensors, attrs);
  std::array<Tensor, kMaxOpOutputs> outs;
  const int n = dispatch(op, tensors, attrs, outs);
  return std::vector<Tensor>(outs.begin(), outs.begin() + n);
}

void refuse_allowed_type(const std::string& name, const std::string& what, const char* type) {
  throw Error(concat("allow_in_graph('", name, "'): ", what, " has type ", type,
                     "; only tensors, numbers, std::vector<Tensor> and std::vector of numbers "
                     "can cross into a graph (and the result must be a Tensor or a "
                     "std::vector<Tensor>)"));
}

void refuse_allowed_arity(const std::string& name, size_t numbers) {
  throw Error(concat("allow_in_graph('", name, "'): the function takes ", numbers,
                     " number or number-list arguments; at most ", Attrs::kMax - 1,
                     " are supported (pass more as a tensor or a std::vector)"));
}

}  // namespace kiln::detail
