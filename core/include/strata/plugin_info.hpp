// plugin_info.hpp — what happened to each plugin file, the ops of the registry,
// and the calls that fell back to the CPU, as the runtime reports them.
#pragma once

#include <strata/device_info.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

/// What happened to one plugin file (or search path).
struct PluginInfo {
  std::string name;  // from the table when loaded, else from the file name
  std::string path;
  bool loaded = false;
  std::string reason;  // why it was refused
  std::string vendor;
  std::string version;
  std::string abi;  // the plugin's ABI version, "2.0"
  int score = 0;
  /// Whether its init succeeded (its shutdown then runs: at exit, or at once
  /// when the core refuses the plugin afterwards). Superseded builds are
  /// never initialised.
  bool initialized = false;
  /// Parts of the plugin refused while the rest was kept, with the reason
  /// (a malformed kernel entry, an op registered under another namespace).
  std::vector<std::string> warnings;
  /// Ops the plugin defined through the host services ("acme::swiglu").
  std::vector<std::string> ops;
  /// Extensions on its table that the core knows, "strata.native_handles v1".
  std::vector<std::string> extensions;
  std::vector<DeviceInfo> devices;
  /// How the plugin was checked before it entered this process:
  /// "child process, 41 ms", "cached child probe", or "in this process
  /// (plugins.isolate is false)" (docs/configuration.md, "Plugin isolation").
  std::string probed;
  /// The file's SHA-256 when the configuration pins the plugin
  /// ("plugins.pins"), else empty.
  std::string sha256;
};

/// One attribute an op takes (its declared schema).
struct OpAttrInfo {
  std::string name;      // "dims"
  std::string kind;      // the ABI kind's name: "INT", "INTS", "FLOAT", "SCALAR", "DTYPE", ...
  bool required = true;  // every call carries it
};

/// Where an op's checks draw its inputs (docs/ops.md, "Test domains"): the
/// conformance cases of `strata plugin check` and the gradient checks read it.
struct OpTestDomain {
  double lo = -1.5, hi = 1.5;  // float inputs drawn uniformly from [lo, hi]
  double grid = 0.0;           // > 0: on multiples of grid (ties included)
  int orders = 3;              // derivative orders checked: 3 smooth, 1 kinks, 0 none
  int nonzero_input = -1;      // this input drawn with |v| in [0.5, 2] instead; -1: none
  uint32_t flat_inputs = 0;    // bit k: the op is flat in input k (not differentiated)
  /// False for a plugin op whose schema gives no domain (the fields are
  /// then the defaults).
  bool declared = true;
};

/// One op of the registry, as `strata ops` lists it.
struct OpInfo {
  std::string name;          // the kernel name: "strata::add", "acme::swiglu"
  std::string kind;          // "primitive", "composite", "view", "join", "transfer"
  int n_inputs = 0;          // -1: any number
  int n_outputs = 0;
  uint32_t version = 1;      // contract version kernels declare
  bool differentiable = false;  // has a reverse-mode rule
  bool forward_mode = false;    // has a forward-mode rule
  std::string plugin;        // the plugin that defined it ("" for the core's)
  std::string doc;           // the plugin's one-line description
  /// What the op is (docs/ops.md, "Tags"): "pointwise", "broadcasting",
  /// "reduction", "view", "data_movement", "linalg", "indexing", "random",
  /// "creation", "optimizer", "along_dim", "backward", "predicate", "complex",
  /// "autograd". Empty for plugin-defined ops.
  std::vector<std::string> tags;
  /// The same as bits: bit k is op_tag_list()[k].
  uint32_t tag_bits = 0;
  /// The attributes it takes.
  std::vector<OpAttrInfo> attrs;
  /// The dtypes it computes in (docs/ops.md, "Dtype families"): "any",
  /// "numeric", "floating", "accumulate", "compare", "logical",
  /// "float_only", "index"; "unspecified" for plugin-defined ops.
  std::string dtypes;
  bool takes_complex = false;  // c64 and c128 too
  bool complex_only = false;   // only the complex dtypes of its family
  /// Under autocast: "none", "lower_precision", "fp32" or "promote".
  std::string autocast;
  /// How it runs under vmap (docs/vmap.md): "pointwise", "reduction",
  /// "along dim" (rules derived from its tags), "own rule", "leading dims"
  /// (a plugin op's declared property, ABI 2.5), "view function",
  /// "join function", "creation", "function", "decomposition", or "loop"
  /// (once per lane, counted in vmap_fallback_stats()).
  std::string batching;
  OpTestDomain domain;
};

/// Every tag's name, in bit order (OpInfo::tag_bits).
std::vector<std::string> op_tag_list();

/// An attribute a device's kernel looked for that its op does not declare
/// (a kernel bug: ABI 2.2's strata_kernel_call::attr_missing), with how often.
struct AttrMisread {
  std::string device;     // "mini:0"
  std::string op;         // "strata::add"
  std::string attribute;  // the name the kernel looked for: "alpha"
  std::string declared;   // what the op takes: "none", "dim INT"
  uint64_t count = 0;
};

/// One (device, op) pair that ran on the CPU because the device had no
/// kernel for it.
/// One op a program ran while a census was open (Runtime::start_op_census):
/// where, with which signature, how often, and how the device served it.
struct OpUse {
  std::string device;     // "mini:0"
  std::string op;         // "strata::mul"
  std::string signature;  // "f32,f32->f32"
  /// "kernel", "decomposition" (into other ops, each counted too),
  /// "fallback" (run on cpu:0), "fallback (kernel set aside)", or "kernel
  /// (declined calls decomposed)" when the kernel declined some of the
  /// calls (Runtime::declined_kernels() has its reason).
  std::string how;
  uint64_t count = 0;
};

struct FallbackRecord {
  std::string device;
  std::string op;
  std::string signature;
  uint64_t count = 0;
};

/// Calls a device's kernel declined (STRATA_ERROR_UNSUPPORTED: a layout or
/// a program it does not handle) that the core then ran as the op's
/// decomposition on the same device (Runtime::declined_kernels()).
struct DeclinedKernelRecord {
  std::string device;
  std::string op;
  std::string signature;
  std::string reason;  // the kernel's message, the latest
  uint64_t count = 0;
};

}  // namespace strata
