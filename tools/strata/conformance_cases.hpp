// conformance_cases.hpp — the cases of `strata plugin check`: what is run on
// the device under test, what it is compared with, and how closely.
//
// A case is a named check with an outcome (pass, fail, skip, fallback,
// unsupported). Op cases build their inputs from host values, run the op on
// the device under test in the dtype of the kernel's signature, run the same
// op on the reference device (cpu:0) with floating inputs widened to f64, and
// compare element by element with the tolerance of the output dtype
// (docs/writing-a-backend.md, "Checking a backend"). The list of cases
// depends only on the device's properties, its kernel table and the options,
// so every worker process of one check builds the same list and can resume
// after a case that crashed.
#pragma once

#include <strata/strata.hpp>

#include <functional>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace strata::cli::conformance {

/// The outcome of one case. Order matters: a matrix cell shows the worst
/// state of its cases (crash and hang are added by the parent process).
enum class Status { skip, pass, fallback, unsupported, fail };

std::string_view status_name(Status s);

struct Outcome {
  Status status = Status::pass;
  std::string message;
  /// Largest |device - reference| of the compared elements (NaN: none compared).
  double max_error = 0.0;
};

/// One named case. `op` and `dtype` place it in the op x dtype matrix
/// ("" for the general checks: manifest, device, memory, asynchrony).
struct Case {
  std::string name;
  std::string op;
  std::string dtype;
  std::function<Outcome()> run;
};

/// What a worker needs to build the case list.
struct Context {
  Device dut;             // the device under test
  Device reference;       // cpu:0
  bool reference_is_dut = false;
  DeviceInfo info;        // the device under test's properties and kernels
  PluginInfo plugin;      // its plugin
  bool quick = false;     // fewer shapes, no large ones
  std::optional<std::regex> op_filter;  // --op: only op cases whose op matches
  /// Cells ("strata::add|f32") whose kernel failed, crashed or hung in a
  /// case run so far (the worker adds them as results come): the general
  /// cases that use a kernel on the device skip, naming it, rather than
  /// blame themselves for it.
  std::set<std::string> failed_cells;
};

/// Wraps a case of a claimed kernel of `op` with the fallback and
/// attribute-misread accounting every op case gets.
using Observe = std::function<std::function<Outcome()>(const std::string& op, std::function<Outcome()> body)>;

/// The cases of a kernel of a plugin-defined op (conformance_plugin_ops.cpp):
/// a forward case against the reference when it can run the op, and a
/// derivative case (VJP to order 2, JVP) against central finite differences,
/// built from the op's schema (`info`) and the kernel's dtypes.
void add_plugin_op_cases(const Context& ctx, const KernelInfo& kernel, const OpInfo& info,
                         const std::vector<DType>& in, const std::vector<DType>& out, const Observe& observe,
                         std::vector<Case>& cases, std::vector<Case>& gradient_cases);

/// The cases the plugin under test exports (its strata.test_cases
/// extension, conformance_plugin_ops.cpp): each runs its op on its inputs
/// and attributes on the device under test, against the outputs it expects
/// or else the reference; with STRATA_TEST_CASE_DERIVATIVES, a derivative
/// case at those inputs as for a plugin op. A malformed case fails its row,
/// naming the field. `observe` wraps each with the fallback accounting.
void add_exported_cases(const Context& ctx, const Observe& observe, std::vector<Case>& cases,
                        std::vector<Case>& gradient_cases);

/// Every case of a check, in a fixed order: the general checks first, then
/// the op cases of every claimed kernel, then one case per primitive the
/// device has no kernel for (expected to fall back), then the checks of
/// asynchronous semantics (which queue adds), then the gradients.
std::vector<Case> build_cases(const Context& ctx);

}  // namespace strata::cli::conformance
