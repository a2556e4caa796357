// kiln::compile and the controls around it: graph capture by lazy tracing (DESIGN.md, "Capture
// by lazy tracing"), guards and the compiled-graph cache, stances, and the fine-grained tracing
// APIs of the reference documents (disable, disallow_in_graph, allow_in_graph, graph_break,
// is_compiling). The guide is docs/compile.md; explain() and the logs are in debug.h.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/capture/pure_call.h"
#include "kiln/ir/graph.h"

namespace kiln {

// fullgraph=true and a graph break was reached (names the reason and the user's line).
class GraphBreakError : public Error {
  using Error::Error;
};
// The stance is fail_on_recompile and a call needed a new compile (names the reason).
class RecompileError : public Error {
  using Error::Error;
};

// ---- backends ----
// What a backend returns: runs the graph on the placeholders' tensors. `runtime_values` are
// the graph's runtime attributes for this call (Graph::runtime_attrs order: the seed and offset
// of each random op), to be used in place of the values baked into the graph. Outputs must be
// contiguous tensors of the graph outputs' dtype and shape that alias no input.
using CompiledGraph = std::function<std::vector<Tensor>(std::span<const Tensor> inputs,
                                                        std::span<const int64_t> runtime_values)>;
// A backend: compiles a captured graph, given the metadata of its example inputs. Called once
// per cache miss; may throw kiln::Error (the call fails and nothing is cached). Any callable
// `CompiledGraph(const ir::Graph&, std::span<const TensorMeta>)` is a plain backend: a graph
// that needs gradients runs the eager derivatives of its ops backward. aot_autograd makes an
// AOT backend, which also compiles the backward (Backend::aot()). A dynamic graph
// (docs/dynamic_shapes.md) is compiled again at each new binding of its sizes, as an instance
// that counts no recompile: a backend shares what does not depend on sizes between them
// (inductor's generated code takes sizes as arguments, and one module serves them all).
class Backend {
 public:
  using CompileFn =
      std::function<CompiledGraph(const ir::Graph& graph, std::span<const TensorMeta> inputs)>;
  struct AotCompilers;

  Backend() = default;
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, Backend> &&
           std::is_invocable_r_v<CompiledGraph, F&, const ir::Graph&, std::span<const TensorMeta>>)
      Backend(F fn)
      : compile_(std::move(fn)) {}  // NOLINT: any compiling callable is a backend

  // Compiles `graph`; an AOT backend compiles it with its forward compiler, as a graph no
  // gradient flows through.
  CompiledGraph operator()(const ir::Graph& graph, std::span<const TensorMeta> inputs) const;
  explicit operator bool() const { return static_cast<bool>(compile_); }

  // The forward and backward compilers when this is an AOT backend (aot_autograd, "aot_eager",
  // "inductor"); null for a plain one.
  const AotCompilers* aot() const { return aot_.get(); }

  // This backend with `wrapper` called for each graph it compiles, given the graph, its inputs
  // and the compiler to hand it to (a plain backend's callable, or an AOT backend's forward or
  // backward compiler: the result stays an AOT backend). Use it to observe or change what a
  // backend compiles; a plain lambda calling an AOT backend would lose its compiled backward.
  using Wrapper = std::function<CompiledGraph(
      const ir::Graph& graph, std::span<const TensorMeta> inputs, const Backend& compiler)>;
  Backend wrapped(Wrapper wrapper) const;

 private:
  friend Backend aot_autograd(Backend fw_compiler, Backend bw_compiler);
  CompileFn compile_;
  std::shared_ptr<const AotCompilers> aot_;
};
struct Backend::AotCompilers {
  Backend forward;
  Backend backward;  // never empty (aot_autograd puts the forward compiler where none is given)
};
// AOT autograd around backend compilers (torch's aot_autograd(fw_compiler=, bw_compiler=)):
// for every captured graph whose outputs need gradients, kiln::compile traces the backward
// from the ops' derivatives into a joint graph, splits it with a min-cut (the forward saves
// only what the backward cannot cheaply recompute), compiles the forward with `fw_compiler`
// and the backward with `bw_compiler` (empty: fw_compiler), and gives the graph's outputs one
// autograd node that runs the compiled backward. "aot_eager" is aot_autograd(eager); "inductor"
// is aot_autograd around the code generator. A compiler that is itself an AOT backend
// contributes its own compilers (forward for forward, backward for backward).
Backend aot_autograd(Backend fw_compiler, Backend bw_compiler = {});
// Registers a backend under a name (kiln::Error if the name is taken).
void register_backend(const std::string& name, Backend backend);
// Names of the registered backends, sorted ("eager" is always there).
std::vector<std::string> list_backends();
// The backend registered under `name`; kiln::Error for an unknown or reserved name.
Backend lookup_backend(const std::string& name);

// ---- options and global configuration ----
struct CompileOptions {
  // A registered backend's name or a user callable. Empty: "inductor" (which itself runs the
  // eager kernels, after one warning, where no C++ compiler is installed).
  std::variant<std::string, Backend> backend = std::string();
  // Throw GraphBreakError at the first graph break instead of splitting the graph.
  bool fullgraph = false;
  // Dynamic shapes (docs/dynamic_shapes.md). Unset: automatic — the first graph is exact; when a
  // call's graph differs from a cached one only in sizes, the sizes that changed become symbols
  // and one dynamic graph serves every size from then on. true: every input dim is a symbol from
  // the first call (but sizes 0 and 1, and parameters, buffers and optimizer state). false:
  // every size is exact. Every backend runs dynamic graphs (see Backend).
  std::optional<bool> dynamic;
  // "" or "default"; "max-autotune" (backend "inductor" only): each generated kernel of 4096
  // or more elements is timed on one thread and on all of them at its first run, and runs the
  // faster way from then on (the choice is cached on disk beside the module). Other modes, or a
  // mode with another backend or a callable: ValueError.
  std::string mode;
  // Name used in warnings, logs and reports (default: the call site of compile()); printable
  // text (no control characters).
  std::string name;
  // Compiled entries kept per graph segment of this function (default:
  // compile_config().cache_size_limit); must be >= 0 (0: the first graph only).
  std::optional<int> cache_size_limit;
  // Pure mode (the MLX/JAX jit contract; docs/compile.md "Pure mode"): the function promises
  // to be pure in its tensor arguments and the tensors it captures: no side effects, and
  // control flow that depends only on their shapes and dtypes and on its other arguments'
  // values. A call whose arguments pass the guards of a graph captured before runs that graph
  // without calling the function; other calls capture as usual. A function that cannot run
  // this way (graph breaks, in-place writes, random ops, gradients) is called every time, with
  // one warning saying why.
  bool pure = false;
  // Pure mode's check of that promise: every Nth call that would skip the function calls it,
  // captures, and throws kiln::Error if the graph (or how it reads the arguments, or what it
  // returns) differs from the one pure mode runs. 0: never. Must be >= 0.
  int pure_verify_every = 0;
};

struct CompileConfig {
  // Compiled entries kept per graph segment of a compiled function; past it the function runs
  // eagerly, with one warning. Must be >= 0 (checked when a function is compiled).
  int cache_size_limit = 8;
  // Seconds one build of generated C++ may take (inductor); past it the compiler's process
  // group is killed and the graph runs with the eager kernels, with one warning. 0: no limit.
  // Starts as $KILN_COMPILE_TIMEOUT when that is set. Must be >= 0.
  double compile_timeout = 300;
  // What inductor does when its cache folder cannot be used (another user could write it, it is
  // not writable, it cannot be made): false warns once and uses a private temporary folder for
  // this process; true throws kiln::Error. Starts true when $KILN_CACHE_STRICT is 1.
  bool strict_cache = false;
  // The `dynamic` of every function compiled without one of its own (CompileOptions::dynamic
  // unset; pure mode excepted, its graphs are exact): false turns dynamic shapes off for the
  // whole program (every new size recompiles), true makes every input dim dynamic from the
  // first call. Unset: automatic, per function. Starts as $KILN_DYNAMIC_SHAPES (0 or 1) when
  // that is set (torch's TORCHDYNAMO_DYNAMIC_SHAPES).
  std::optional<bool> dynamic;
};
// The process's configuration. Its first use reads KILN_COMPILE_TIMEOUT, KILN_CACHE_STRICT and
// KILN_DYNAMIC_SHAPES (ValueError when one is set to something else than a number >= 0 / 0 or
// 1 / 0 or 1).
CompileConfig& compile_config();

// What a compiled function does on each call (torch.compiler.set_stance).
enum class Stance {
  Default,           // capture, compile on a miss
  ForceEager,        // run every compiled function eagerly
  EagerOnRecompile,  // use cached graphs; a miss after the first compile runs eagerly
  FailOnRecompile,   // use cached graphs; a miss after the first compile throws RecompileError
};
void set_stance(Stance stance);
Stance stance();
// Sets the stance for a scope (per process), restoring the previous one on exit.
class StanceGuard {
 public:
  explicit StanceGuard(Stance s) : prev_(stance()) { set_stance(s); }
  ~StanceGuard() { set_stance(prev_); }
  StanceGuard(const StanceGuard&) = delete;
  StanceGuard& operator=(const StanceGuard&) = delete;

 private:
  Stance prev_;
};

// Drops every compiled function's cached graphs and counters (torch._dynamo.reset()).
void reset();

namespace capture {
struct PureObservation;
}
namespace detail {
class CompiledState;
struct PurePlan;
// Pure mode, before a call: runs a graph whose guards `args` pass, leaving its results in
// `results` (Run); or says that the function must be called and captured (Capture), or called,
// captured and compared with the graph pure mode would have run, `verify` (Verify).
enum class PureStep { Run, Capture, Verify };
// `result_layout`, when given, receives what learn_pure stored with the plan that ran (a front
// end's description of how its result is rebuilt from `results`).
PureStep pure_try_run(CompiledState& state, const PureArgs& args, std::vector<Tensor>& results,
                      std::shared_ptr<const PurePlan>& verify,
                      std::shared_ptr<const void>* result_layout = nullptr);
bool is_pure(const CompiledState& state);
// Begins a call of a compiled function on this thread: captures, inlines into an enclosing
// capture, or runs eagerly, as the stance and the controls say.
class CallScope {
 public:
  // `args`: the call's tensor arguments, which recompile reasons name.
  CallScope(const std::shared_ptr<CompiledState>& state, bool frozen, const ArgumentTensors& args);
  ~CallScope();  // abandons the capture if fn threw
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;
  // Ends the capture at the function's return: runs the last segment (outputs concrete).
  void finish();
  // Pure mode, after finish(): learns how to run this call's graph without the function (or,
  // with `verify`, checks that it is the graph `verify` runs). `results` is null when the
  // result's type is one pure mode cannot rebuild.
  // `result_layout` is kept with the plan and handed back by pure_try_run (C++ results are
  // rebuilt from their type; the Python package describes its result's nesting).
  void learn_pure(const PureArgs& args, const std::vector<const Tensor*>* results,
                  const std::shared_ptr<const PurePlan>& verify,
                  std::shared_ptr<const void> result_layout = nullptr);

 private:
  std::shared_ptr<CompiledState> state_;
  std::shared_ptr<capture::PureObservation> pure_;
  bool started_ = false;
  bool finished_ = false;
};
std::shared_ptr<CompiledState> make_compiled_state(CompileOptions options,
                                                   std::source_location loc);
}  // namespace detail

// A compiled function: call it like fn. Copies share the compiled-graph cache.
template <class F>
class CompiledFunction {
 public:
  CompiledFunction(F fn, std::shared_ptr<detail::CompiledState> state, bool frozen = false)
      : fn_(std::move(fn)), state_(std::move(state)), frozen_(frozen) {}

  template <class... Args>
  decltype(auto) operator()(Args&&... args) const {
    if (detail::is_pure(*state_)) return call_pure(std::forward<Args>(args)...);
    detail::CallScope scope(state_, frozen_, detail::argument_tensors(args...));
    using R = std::invoke_result_t<const F&, Args&&...>;
    if constexpr (std::is_void_v<R>) {
      std::invoke(fn_, std::forward<Args>(args)...);
      scope.finish();
    } else {
      R result = std::invoke(fn_, std::forward<Args>(args)...);
      scope.finish();
      return result;
    }
  }
  // The reference FAQ's frozen mode (dynamo.run): cached graphs are used, nothing new is
  // compiled, and a miss runs eagerly.
  CompiledFunction frozen() const { return CompiledFunction(fn_, state_, true); }
  const std::shared_ptr<detail::CompiledState>& state() const { return state_; }

 private:
  // Pure mode: a hit runs the graph and rebuilds the result; otherwise fn runs under capture
  // and the call teaches (or verifies) how to skip it next time.
  template <class... Args>
  std::invoke_result_t<const F&, Args&&...> call_pure(Args&&... args) const {
    using R = std::invoke_result_t<const F&, Args&&...>;
    using Result = detail::PureResult<std::remove_cvref_t<R>>;
    const detail::PureArgs pure_args = detail::pure_args(args...);
    std::shared_ptr<const detail::PurePlan> verify;
    if constexpr (Result::supported && !std::is_reference_v<R>) {
      std::vector<Tensor> results;
      if (detail::pure_try_run(*state_, pure_args, results, verify) == detail::PureStep::Run) {
        if constexpr (!std::is_void_v<R>)
          return Result::build(results);
        else
          return;
      }
    }
    detail::CallScope scope(state_, frozen_, detail::argument_tensors(args...));
    if constexpr (std::is_void_v<R>) {
      std::invoke(fn_, std::forward<Args>(args)...);
      scope.finish();
      const std::vector<const Tensor*> none;
      scope.learn_pure(pure_args, &none, verify);
    } else {
      R result = std::invoke(fn_, std::forward<Args>(args)...);
      scope.finish();
      if constexpr (Result::supported && !std::is_reference_v<R>) {
        std::vector<const Tensor*> flat;
        Result::flatten(result, flat);
        scope.learn_pure(pure_args, &flat, verify);
      } else {
        scope.learn_pure(pure_args, nullptr, verify);
      }
      return result;
    }
  }

  F fn_;
  std::shared_ptr<detail::CompiledState> state_;
  bool frozen_;
};

// torch.compile: returns a callable with fn's signature that captures graphs from fn's tensor
// ops and runs them through the backend (see docs/compile.md).
template <class F>
CompiledFunction<std::decay_t<F>> compile(
    F&& fn, CompileOptions options = {},
    std::source_location loc = std::source_location::current()) {
  return CompiledFunction<std::decay_t<F>>(std::forward<F>(fn),
                                           detail::make_compiled_state(std::move(options), loc));
}
// torch._dynamo.run: the frozen form of a compiled function.
template <class F>
CompiledFunction<F> run(const CompiledFunction<F>& compiled) {
  return compiled.frozen();
}

// ---- dynamic shapes (docs/dynamic_shapes.md) ----
// Marks dim `dim` of `t` dynamic for the compiled functions it is passed to (torch._dynamo
// .mark_dynamic): their graphs take its size as a symbol from the first call. A backend that
// cannot compile dynamic shapes, or a dim that cannot be one (size 0 or 1), is an error when the
// graph is compiled, naming the dim. The mark stays with the tensor (not with its views).
void mark_dynamic(const Tensor& t, int64_t dim);
// As mark_dynamic, but never an error: where the dim cannot be dynamic it is exact.
void maybe_mark_dynamic(const Tensor& t, int64_t dim);
// Dim `dim` of `t` stays exact, whatever the policy (torch._dynamo.mark_static).
void mark_static(const Tensor& t, int64_t dim);
// As mark_dynamic, but sizes 0 and 1 do not specialise: the dim's symbol ranges over [0, inf)
// (torch._dynamo.mark_unbacked), so an empty or one-row batch runs on the same dynamic graph.
// Code whose ops differ at such a size (a branch on it) gets another graph, not an error.
void mark_unbacked(const Tensor& t, int64_t dim);

// ---- fine-grained tracing controls ----
// A graph break here: the ops captured so far run as one graph, capture resumes after.
void graph_break(std::source_location loc = std::source_location::current());
// True under kiln::compile's capture and while a backend compiles, traces or runs a graph
// (torch.compiler.is_compiling: "a graph is executed/traced as part of torch.compile()"); so
// an allow_in_graph function sees true when the graph that holds it runs.
bool is_compiling();
// True only under the frontend's capture (torch.compiler.is_dynamo_compiling).
bool is_dynamo_compiling();
// True while a backend compiles a dynamic graph or one of its instances (docs/dynamic_shapes.md):
// the same code will serve other sizes, so a backend should not decide from the graph's sizes
// what it can decide per call (inductor then chooses its loops at run time).
bool compiling_dynamic_graph();

struct DisableOptions {
  // true: everything fn calls also runs eagerly, compiled functions included.
  // false: fn's own ops run eagerly, but compiled functions it calls still compile.
  bool recursive = true;
};
namespace detail {
// A region in which capture is off (see disable). Pending tensors are made concrete first.
class DisableScope {
 public:
  DisableScope(const char* what, bool recursive, std::source_location loc);
  ~DisableScope();
  DisableScope(const DisableScope&) = delete;
  DisableScope& operator=(const DisableScope&) = delete;
};
}  // namespace detail
// The scoped form: `{ kiln::DisableGuard off; ... }` runs the block eagerly.
class DisableGuard : public detail::DisableScope {
 public:
  explicit DisableGuard(DisableOptions options = {},
                        std::source_location loc = std::source_location::current())
      : DisableScope("a kiln::DisableGuard block", options.recursive, loc) {}
};
// torch.compiler.disable: returns fn wrapped so that calling it under capture ends the graph
// (a graph break) and runs fn eagerly.
template <class F>
auto disable(F fn, DisableOptions options = {},
             std::source_location loc = std::source_location::current()) {
  return [fn = std::move(fn), options, loc](auto&&... args) -> decltype(auto) {
    detail::DisableScope scope("a function wrapped by kiln::disable", options.recursive, loc);
    return std::invoke(fn, std::forward<decltype(args)>(args)...);
  };
}

// torch._dynamo.disallow_in_graph: the op (by name) always breaks the graph and runs eagerly.
// Global; allow_in_graph(name) undoes it. kiln::Error for an unknown op.
void disallow_in_graph(const std::string& op_name);
void allow_in_graph(const std::string& op_name);
bool is_disallowed_in_graph(const OpDef& op);

}  // namespace kiln

#include "kiln/capture/allow_in_graph.h"
