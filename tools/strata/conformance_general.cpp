// conformance_general.cpp — the general checks of `strata plugin check`:
// the plugin's manifest and ABI, the device's properties, memory and copies,
// and asynchronous semantics. They have no place in the op x dtype matrix
// (their `op` is empty); the report lists them first.
#include "conformance_support.hpp"

#include <strata/plugin/strata_plugin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace strata::cli::conformance {

namespace {

Outcome pass(std::string message = {}) { return {Status::pass, std::move(message), 0.0}; }
Outcome fail(std::string message) { return {Status::fail, std::move(message), 0.0}; }

Outcome check_manifest(const PluginInfo& p) {
  std::string problems;
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) problems += (problems.empty() ? "" : "; ") + what;
  };
  need(!p.name.empty(), "empty name");
  need(!p.vendor.empty(), "empty vendor");
  need(!p.version.empty(), "empty version");
  need(p.abi.rfind("2.", 0) == 0, "ABI \"" + p.abi + "\", expected major 2");
  for (const std::string& w : p.warnings) need(false, "the core refused part of the plugin: " + w);
  if (!problems.empty()) return fail(problems);
  return pass(p.name + " " + p.version + " (" + p.vendor + "), ABI " + p.abi);
}

Outcome check_device(const DeviceInfo& d) {
  std::string problems;
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) problems += (problems.empty() ? "" : "; ") + what;
  };
  need(!d.name.empty(), "empty device name");
  need(d.memory_bytes > 0, "memory_bytes is 0");
  need(!d.dtypes.empty(), "no storable dtypes");
  need(std::find(d.dtypes.begin(), d.dtypes.end(), DType::f32) != d.dtypes.end(),
       "f32 is not storable (the default dtype of every creation function)");
  need(!d.kernels.empty(), "no kernels: every op would fall back");
  if (!problems.empty()) return fail(problems);
  std::string dtypes;
  for (DType t : d.dtypes) dtypes.append(dtypes.empty() ? "" : " ").append(dtype_name(t));
  return pass("\"" + d.name + "\", " + std::string(device_type_name(d.type)) + ", " + format_bytes(d.memory_bytes) +
              ", dtypes " + dtypes + ", " + std::to_string(d.kernels.size()) + " kernels");
}

/// Host bytes of `n` elements of `dtype`: random finite values (0/1 for bool)
/// in the dtype's encoding, made on the reference device.
std::vector<uint8_t> random_bytes(int64_t n, DType dtype, Device reference, const std::string& name) {
  std::mt19937_64 rng = rng_for(name);
  Operand op = random_operand(rng, {n}, dtype, Layout::contiguous,
                              is_integral(dtype) ? ValueRange{-1e9, 1e9, true} : ValueRange{-1e4, 1e4, false});
  return materialise(op, reference, dtype).to_bytes();
}

Outcome compare_bytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, DType dtype,
                      const std::string& what) {
  if (got.size() != want.size()) {
    return fail(what + ": read back " + std::to_string(got.size()) + " bytes, wrote " + std::to_string(want.size()));
  }
  const size_t es = dtype_size(dtype);
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); i += es) {
    if (std::memcmp(&got[i], &want[i], es) != 0) {
      if (bad++ == 0) first = i / es;
    }
  }
  if (bad == 0) return pass();
  Outcome o = fail(what + ": " + std::to_string(bad) + " of " + std::to_string(got.size() / es) +
                   " elements differ, the first at element " + std::to_string(first));
  o.max_error = std::numeric_limits<double>::infinity();
  return o;
}

Outcome round_trip(const Context& ctx, DType dtype, int64_t n, const std::string& name) {
  std::vector<uint8_t> bytes = random_bytes(n, dtype, ctx.reference, name);
  Tensor t = from_bytes(bytes, {n}, {.dtype = dtype, .device = ctx.dut});
  Outcome o = compare_bytes(t.to_bytes(), bytes, dtype, "host -> " + ctx.dut.str() + " -> host of " +
                                                           std::to_string(n) + " " + std::string(dtype_name(dtype)));
  if (o.status == Status::pass) {
    o.message = std::to_string(n) + " elements (" + format_bytes(bytes.size()) + ")";
    if (bytes.size() >= 64 * 1024) {
      o.message += "; staged copies so far: " + std::to_string(runtime().device_memory_info(ctx.dut).staged_copies);
    }
  }
  return o;
}

/// Reads of views at offsets and with steps (the copy kernel compacts them).
Outcome slices_at_offsets(const Context& ctx) {
  const int64_t n = 4097;
  std::vector<double> host(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) host[static_cast<size_t>(i)] = static_cast<double>(i % 1000) - 500.0;
  Tensor t = from_data(std::span<const double>(host), {n}, {.dtype = DType::f32, .device = ctx.dut});
  struct View {
    int64_t start, end, step;
  };
  for (View v : {View{13, n, 1}, View{5, 4000, 3}, View{4096, 4097, 1}, View{1, 2049, 2}}) {
    std::vector<double> want;
    for (int64_t i = v.start; i < v.end; i += v.step) want.push_back(host[static_cast<size_t>(i)]);
    const std::string what = "slice(" + std::to_string(v.start) + ", " + std::to_string(v.end) + ", step " +
                             std::to_string(v.step) + ") of f32[4097]";
    Outcome direct = compare_values(t.slice(0, v.start, v.end, v.step).to_vector<double>(), want, {}, what);
    if (direct.status != Status::pass) return direct;
    Outcome compacted =
        compare_values(t.slice(0, v.start, v.end, v.step).contiguous().to_vector<double>(), want, {}, what + ", contiguous()");
    if (compacted.status != Status::pass) return compacted;
  }
  return pass("4 views at offsets 13, 5, 4096 and 1, steps 1 to 3");
}

Outcome device_clone(const Context& ctx) {
  const int64_t n = 1000;
  std::vector<double> host(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) host[static_cast<size_t>(i)] = 0.25 * static_cast<double>(i);
  Tensor t = from_data(std::span<const double>(host), {n}, {.dtype = DType::f32, .device = ctx.dut});
  Tensor c = t.clone();
  t.copy_(zeros({n}, {.dtype = DType::f32, .device = ctx.dut}));
  Outcome o = compare_values(c.to_vector<double>(), host, {}, "clone of f32[1000], original overwritten after");
  if (o.status != Status::pass) return o;
  o = compare_values(t.to_vector<double>(), std::vector<double>(static_cast<size_t>(n), 0.0), {},
                     "the original after copy_(zeros)");
  if (o.status == Status::pass) o.message = "clone keeps its values after the original is overwritten";
  return o;
}

/// copy_ of a slice onto an overlapping slice of the same storage, compared
/// with the result of copying from a snapshot of the source (what NumPy's
/// assignment and memmove give). Tensor::copy_ promises that: the core
/// snapshots an overlapping source before the copy kernel runs, so a kernel
/// never sees overlapping ranges, and any difference is a failure.
Outcome overlapping_copy(const Context& ctx) {
  const int64_t n = 100;
  std::vector<double> host(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) host[static_cast<size_t>(i)] = static_cast<double>(i);
  struct Move {
    int64_t dst, src, len;
  };
  for (Move m : {Move{10, 0, 50}, Move{0, 10, 50}}) {
    Tensor x = from_data(std::span<const double>(host), {n}, {.dtype = DType::f32, .device = ctx.dut});
    x.slice(0, m.dst, m.dst + m.len).copy_(x.slice(0, m.src, m.src + m.len));
    std::vector<double> want = host;
    for (int64_t i = 0; i < m.len; ++i) want[static_cast<size_t>(m.dst + i)] = host[static_cast<size_t>(m.src + i)];
    Outcome o = compare_values(x.to_vector<double>(), want, {},
                               "x[" + std::to_string(m.dst) + ":" + std::to_string(m.dst + m.len) + "].copy_(x[" +
                                   std::to_string(m.src) + ":" + std::to_string(m.src + m.len) + "]) of f32[100]");
    if (o.status != Status::pass) return o;
  }
  return pass("forward and backward overlapping slices of one storage");
}

Outcome dependent_chain(const Context& ctx, bool synchronize) {
  const int64_t n = 4096, steps = 200;
  Tensor x = zeros({n}, {.dtype = DType::f32, .device = ctx.dut});
  for (int64_t k = 0; k < steps; ++k) x = x + 1.0;
  if (synchronize) {
    x = x + x;
    runtime().synchronize(ctx.dut);
  }
  const double want = synchronize ? 2.0 * steps : steps;
  Outcome o = compare_values(x.to_vector<double>(), std::vector<double>(static_cast<size_t>(n), want), {},
                             std::to_string(steps) + " dependent adds on f32[4096] (strata::add" +
                                 ")");
  if (o.status == Status::pass) {
    o.message = std::to_string(steps) + " queued dependent ops, read once" +
                std::string(synchronize ? " after runtime().synchronize()" : "");
  }
  return o;
}

Outcome device_timer(const Context& ctx) {
  Tensor x = zeros({65536}, {.dtype = DType::f32, .device = ctx.dut});
  DeviceTimer timer(ctx.dut);
  timer.start();
  for (int k = 0; k < 20; ++k) x = x + 1.0;
  timer.stop();
  const double ms = timer.elapsed_ms();
  if (!std::isfinite(ms) || ms < 0.0) return fail("DeviceTimer::elapsed_ms() gave " + std::to_string(ms));
  return pass(std::string(timer.device_measured() ? "measured by the device" : "measured by the host clock") + ": " +
              std::to_string(ms) + " ms for 20 adds");
}

/// strata.buffer_views: a view over the device's own memory at the address
/// native_handles gives (the one address a checker can have on any
/// device) reads the values, its writes land in the memory, and its release
/// runs once, after the last tensor over it is gone.
Outcome buffer_views(const Context& ctx) {
  const int64_t n = 1000;
  std::vector<double> host(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) host[static_cast<size_t>(i)] = 0.5 * static_cast<double>(i) - 7.0;
  Tensor owner = from_data(std::span<const double>(host), {n}, {.dtype = DType::f32, .device = ctx.dut});
  runtime().synchronize(ctx.dut);
  void* address = native_view(owner).data;
  int released = 0;
  {
    Tensor view = tensor_from_native(address, DType::f32, std::vector<int64_t>{n}, {}, ctx.dut, [&] { ++released; });
    if (native_view(view).data != address) return fail("buffer_pointer of the view is not the address it was made of");
    Outcome o = compare_values(view.to_vector<double>(), host, {}, "a view of f32[1000], read");
    if (o.status != Status::pass) return o;
    view.slice(0, 0, n / 2).copy_(zeros({n / 2}, {.dtype = DType::f32, .device = ctx.dut}));
    std::vector<double> want = host;
    std::fill(want.begin(), want.begin() + n / 2, 0.0);
    o = compare_values(owner.to_vector<double>(), want, {}, "the memory after copy_(zeros) into half the view");
    if (o.status != Status::pass) return o;
    if (released != 0) return fail("the view's release ran while the view was alive");
  }
  if (released != 1) return fail("the view's release ran " + std::to_string(released) + " times, not once");
  return pass("a view of f32[1000] at its native address reads, writes and is released once");
}

}  // namespace

void add_general_cases(const Context& ctx, std::vector<Case>& cases) {
  cases.push_back({"manifest and ABI", "", "", [&ctx] { return check_manifest(ctx.plugin); }});
  cases.push_back({"device properties", "", "", [&ctx] { return check_device(ctx.info); }});
  for (DType t : ctx.info.dtypes) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{4097}, int64_t{(1 << 20) + 3}}) {
      std::string name = "round trip " + std::string(dtype_name(t)) + " x" + std::to_string(n);
      if (n > 4097) name += " (large copy)";
      cases.push_back({name, "", "", [&ctx, t, n, name] { return round_trip(ctx, t, n, name); }});
    }
  }
  if (std::find(ctx.info.dtypes.begin(), ctx.info.dtypes.end(), DType::f32) == ctx.info.dtypes.end()) return;
  cases.push_back({"copies at offsets and steps", "", "", [&ctx] { return slices_at_offsets(ctx); }});
  cases.push_back({"device-to-device clone", "", "", [&ctx] { return device_clone(ctx); }});
  cases.push_back({"overlapping copy_", "", "", [&ctx] { return overlapping_copy(ctx); }});
  const auto& ext = ctx.plugin.extensions;
  auto offers = [&ext](const std::string& name) { return std::find(ext.begin(), ext.end(), name) != ext.end(); };
  if (offers(STRATA_EXT_BUFFER_VIEWS " v1")) {
    cases.push_back({"buffer views", "", "", [&ctx, offers] {
                       if (!offers(STRATA_EXT_NATIVE_HANDLES " v1")) {
                         return Outcome{Status::skip,
                                        "not run: the check views the device's own memory at the address "
                                        "strata.native_handles gives, which the plugin does not offer",
                                        0.0};
                       }
                       return buffer_views(ctx);
                     }});
  }
}

void add_queue_cases(const Context& ctx, std::vector<Case>& cases) {
  if (std::find(ctx.info.dtypes.begin(), ctx.info.dtypes.end(), DType::f32) == ctx.info.dtypes.end()) return;
  // The adds they queue are the device's own kernel when it has one: a
  // wrong one is its own rows' failure, not these checks'.
  auto needing_add = [&ctx](Outcome (*check)(const Context&, bool), bool flag) {
    return [&ctx, check, flag] {
      if (ctx.failed_cells.contains("strata::add|f32")) {
        return Outcome{Status::skip, "not run: strata::add f32 failed its own cases, and this check queues adds", 0.0};
      }
      return check(ctx, flag);
    };
  };
  cases.push_back({"asynchronous chain read once", "", "", needing_add(dependent_chain, false)});
  cases.push_back({"results after synchronize", "", "", needing_add(dependent_chain, true)});
  cases.push_back({"DeviceTimer", "", "", needing_add([](const Context& c, bool) { return device_timer(c); }, false)});
}

}  // namespace strata::cli::conformance
