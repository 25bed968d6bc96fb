// plugin_check_worker.cpp — the worker process of `strata plugin check`:
// loads exactly the plugin under test and the in-tree CPU plugin (the
// reference), builds the case list and runs it from a given case on,
// writing one JSON line per event to the parent's pipe:
//
//   {"event":"hello","cases":N,"plugin":{...},"device":{...}}   (or "refused")
//   {"event":"start","case":17,"name":"...","op":"strata::add","dtype":"f32"}
//   {"event":"result","case":17,"status":"pass","message":"...","max_error":0}
//   {"event":"done"}
#include "conformance_cases.hpp"
#include "plugin_check.hpp"
#include "worker_process.hpp"

#include <strata/strata.hpp>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <set>

namespace strata::cli {

namespace {

namespace fs = std::filesystem;

std::string canonical(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(path, ec);
  return ec ? path : p.string();
}

/// The configuration of the worker: the plugin under test and the CPU
/// plugin (unless the plugin under test is a CPU plugin: then it is its own
/// reference), a missing kernel falls back to the CPU (counted, so that the
/// cases can tell), only errors logged.
Config worker_config(const std::string& plugin_path, const std::vector<std::string>& exclude, bool& self_reference) {
  const std::string cpu = canonical(library_directory() + "/strata/plugins/libstrata_plugin_cpu.so");
  self_reference = fs::path(plugin_path).filename() == "libstrata_plugin_cpu.so";
  nlohmann::json paths = nlohmann::json::array({plugin_path});
  if (!self_reference) paths.push_back(cpu);
  nlohmann::json doc{{"version", 1},
                     {"plugins", {{"paths", paths}}},
                     {"prefer", {"cpu"}},
                     {"fallback", {{"policy", "cpu"}}},
                     {"logging", {{"level", "error"}, {"sinks", {{{"type", "stderr"}}}}}}};
  for (const std::string& entry : exclude) {  // "device|op signature"
    const size_t bar = entry.find('|');
    if (bar == std::string::npos) continue;
    doc["devices"][entry.substr(0, bar)]["exclude_kernels"].push_back(entry.substr(bar + 1));
  }
  return Config::from_string(doc.dump(), "<strata plugin check>", fs::current_path().string());
}

nlohmann::json plugin_json(const PluginInfo& p) {
  return {{"name", p.name}, {"vendor", p.vendor}, {"version", p.version}, {"abi", p.abi}, {"path", p.path},
          {"warnings", p.warnings}};
}

nlohmann::json device_json(const DeviceInfo& d) {
  nlohmann::json dtypes = nlohmann::json::array();
  for (DType t : d.dtypes) dtypes.push_back(dtype_name(t));
  nlohmann::json kernels = nlohmann::json::array();
  for (const KernelInfo& k : d.kernels) kernels.push_back(k.op + " " + k.signature);
  return {{"id", d.id},          {"name", d.name},   {"type", device_type_name(d.type)},
          {"memory_bytes", d.memory_bytes}, {"dtypes", dtypes}, {"kernels", kernels},
          {"missing_primitives", d.missing_primitives}};
}

}  // namespace

std::string cell_key(const std::string& op, const std::string& dtype) {
  const std::string suffix = " (derivatives)";
  std::string base = op;
  if (base.size() > suffix.size() && base.ends_with(suffix)) base.resize(base.size() - suffix.size());
  return base + "|" + dtype;
}

std::set<std::string> kernel_cells(const std::string& kernel) {
  const size_t space = kernel.find(' ');
  if (space == std::string::npos) return {};
  std::string dtypes = kernel.substr(space + 1);
  for (char& ch : dtypes) ch = ch == ',' || ch == '-' || ch == '>' ? ' ' : ch;
  std::istringstream words(dtypes);
  std::set<std::string> cells;
  for (std::string t; words >> t;) cells.insert(cell_key(kernel.substr(0, space), t));
  return cells;
}

int run_plugin_check_worker(const PluginWorkerOptions& options) {
  const int fd = options.event_fd;
  const std::string path = canonical(options.check.path);
  conformance::Context ctx;
  Runtime& rt = runtime();
  try {
    rt.configure(worker_config(path, options.exclude_kernels, ctx.reference_is_dut));
  } catch (const Error& e) {
    emit_event(fd, {{"event", "refused"}, {"reason", std::string("cannot configure the worker: ") + e.what()}});
    return 0;
  }

  std::vector<PluginInfo> plugins = rt.plugins();
  const PluginInfo* tested = nullptr;
  const PluginInfo* cpu = nullptr;
  for (const PluginInfo& p : plugins) {
    if (canonical(p.path) == path) tested = &p;
    if (p.loaded && p.name == "cpu") cpu = &p;
  }
  if (tested == nullptr) {
    emit_event(fd, {{"event", "refused"}, {"reason", "the runtime did not consider " + path}});
    return 0;
  }
  if (!tested->loaded) {
    emit_event(fd, {{"event", "refused"}, {"reason", tested->reason}, {"plugin", plugin_json(*tested)}});
    return 0;
  }
  if (cpu == nullptr) {
    emit_event(fd, {{"event", "refused"},
              {"reason", "the reference CPU plugin (" + library_directory() + "/strata/plugins) did not load"}});
    return 0;
  }
  if (tested->devices.empty()) {
    emit_event(fd, {{"event", "refused"}, {"reason", "the plugin loaded but has no device"}, {"plugin", plugin_json(*tested)}});
    return 0;
  }
  const DeviceInfo* dut = &tested->devices.front();
  if (!options.check.device.empty()) {
    dut = nullptr;
    for (const DeviceInfo& d : tested->devices) {
      if (d.id == options.check.device) dut = &d;
    }
    if (dut == nullptr) {
      std::string ids;
      for (const DeviceInfo& d : tested->devices) ids += (ids.empty() ? "" : ", ") + d.id;
      emit_event(fd, {{"event", "refused"},
                {"reason", "--device " + options.check.device + " is not a device of " + tested->name + " (it has " +
                               ids + ")"}});
      return 0;
    }
  }
  ctx.plugin = *tested;
  ctx.info = *dut;
  // Kernels set aside (--exclude-kernel) are still the plugin's claims: the
  // case list stays the one the workers before built, and their ops are
  // not "missing".
  for (const KernelInfo& k : ctx.info.kernels) {
    if (k.excluded) std::erase(ctx.info.missing_primitives, k.op.substr(k.op.find("::") + 2));
  }
  ctx.dut = dut->device;
  ctx.reference = Device("cpu:0");
  ctx.quick = options.check.quick;
  if (!options.check.op_regex.empty()) ctx.op_filter.emplace(options.check.op_regex, std::regex::ECMAScript);

  std::vector<conformance::Case> cases = conformance::build_cases(ctx);
  size_t derivatives_from = 0;
  while (derivatives_from < cases.size() && !cases[derivatives_from].op.ends_with(" (derivatives)")) ++derivatives_from;
  emit_event(fd, {{"event", "hello"},
            {"cases", cases.size()},
            {"derivatives_from", derivatives_from},
            {"excluded_kernels", options.exclude_kernels},
            {"plugin", plugin_json(*tested)},
            {"device", device_json(*dut)},
            {"reference", ctx.reference_is_dut ? "cpu:0 (the plugin under test; floats in f64)" : "cpu:0"}});
  // A failure before the derivative cases: with the pause asked for, the
  // parent resumes them in a worker that sets the failed kernels aside, so
  // that a derivative row fails for its own op's kernels and rules only.
  bool failed = !options.skip_cells.empty();
  ctx.failed_cells.insert(options.skip_cells.begin(), options.skip_cells.end());
  ctx.failed_cells.insert(options.failed_cells.begin(), options.failed_cells.end());
  // The cells of the kernels set aside: their own derivative rows are not
  // run (the kernel failed its own cases; its rules would be judged on the
  // reference's kernel instead).
  std::set<std::string> set_aside;
  for (const std::string& entry : options.exclude_kernels) {  // "device|op f32,f32->f32"
    set_aside.merge(kernel_cells(entry.substr(entry.find('|') + 1)));
  }
  for (size_t i = static_cast<size_t>(std::max(options.resume, 0)); i < cases.size(); ++i) {
    if (i == derivatives_from && failed && options.pause_before_derivatives && !ctx.reference_is_dut) {
      emit_event(fd, {{"event", "paused"}, {"case", i}});
      return 0;
    }
    const conformance::Case& c = cases[i];
    emit_event(fd, {{"event", "start"}, {"case", i}, {"name", c.name}, {"op", c.op}, {"dtype", c.dtype}});
    conformance::Outcome o;
    const bool poisoned = !c.op.empty() && std::find(options.skip_cells.begin(), options.skip_cells.end(),
                                                     cell_key(c.op, c.dtype)) != options.skip_cells.end();
    if (poisoned) {
      o = {conformance::Status::skip, "not run: the kernel crashed or hung in an earlier case of " + c.op + " " + c.dtype,
           0.0};
    } else if (!c.op.empty() && set_aside.contains(cell_key(c.op, c.dtype))) {
      o = {conformance::Status::skip, "not run: the kernel failed its own cases and is set aside", 0.0};
    } else {
      try {
        o = c.run();
      } catch (const std::exception& e) {
        o = {conformance::Status::fail, std::string("error: ") + e.what(), 0.0};
      }
    }
    failed = failed || o.status == conformance::Status::fail;
    if (o.status == conformance::Status::fail && !c.op.empty()) ctx.failed_cells.insert(cell_key(c.op, c.dtype));
    emit_event(fd, {{"event", "result"},
              {"case", i},
              {"status", conformance::status_name(o.status)},
              {"message", o.message},
              {"max_error", std::isfinite(o.max_error) ? nlohmann::json(o.max_error) : nlohmann::json("inf")}});
  }
  emit_event(fd, {{"event", "done"}});
  return 0;
}

}  // namespace strata::cli
