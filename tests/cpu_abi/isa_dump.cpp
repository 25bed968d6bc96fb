// isa_dump.cpp — cpu_isa_dump OPTIONS_JSON: loads the CPU plugin with those
// init options (e.g. {"isa": "sse41"}), runs every elementwise kernel of its
// table (unary, binary, comparisons, where, casts) on inputs full of special
// values — NaN, ±inf, ±0, denormals, extremes — in three layouts (compact
// with a length that is no multiple of any vector width, one input
// broadcast, transposed views) — the activations and their backward ops
// too — and prints one line per call:
//
//   <op> <signature> <layout> <status> <FNV-1a hash of the output bytes>
//
// after a first line "loops: <level>" taken from the plugin's init log, and
// before a last line "runs: <loops run at each level>" from its shutdown log.
// cpu_isa_test runs it at every instruction-set level this CPU has and
// requires identical output (the plugin's loops must compute the same bits
// at every level, loop_isa.hpp).
#include "plugin_fixture.hpp"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace {

using namespace strata::cpu_abi;

std::string g_loops = "?";
std::string g_runs = "?";

void capture_log(strata_log_level, const char*, const char* message) {
  const std::string m = message;
  if (m.rfind("loop runs: ", 0) == 0) {
    g_runs = m.substr(11);
  } else if (auto at = m.find("loops "); at != std::string::npos) {
    g_loops = m.substr(at + 6);
  }
}

const strata_host_api* logging_host() {
  static strata_host_api host = [] {
    strata_host_api h = *quiet_host();
    h.log = capture_log;
    return h;
  }();
  return &host;
}

/// The elementwise ops whose kernels are compared.
const char* const kOps[] = {
    STRATA_OP_NEG,     STRATA_OP_ABS,     STRATA_OP_SIGN,      STRATA_OP_RELU,    STRATA_OP_EXP,
    STRATA_OP_LOG,     STRATA_OP_LOG1P,   STRATA_OP_EXPM1,     STRATA_OP_SQRT,    STRATA_OP_RSQRT,
    STRATA_OP_SIN,     STRATA_OP_COS,     STRATA_OP_ATAN,      STRATA_OP_TANH,      STRATA_OP_SIGMOID, STRATA_OP_ERF,
    STRATA_OP_FLOOR,   STRATA_OP_CEIL,    STRATA_OP_ROUND,     STRATA_OP_RECIPROCAL, STRATA_OP_LOGICAL_NOT,
    STRATA_OP_ADD,     STRATA_OP_SUB,     STRATA_OP_MUL,       STRATA_OP_DIV,     STRATA_OP_MAXIMUM,
    STRATA_OP_MINIMUM, STRATA_OP_POW,     STRATA_OP_EQ,        STRATA_OP_NE,      STRATA_OP_LT,
    STRATA_OP_LE,      STRATA_OP_GT,      STRATA_OP_GE,        STRATA_OP_WHERE,   STRATA_OP_CAST,
    STRATA_OP_GELU,    STRATA_OP_SILU,    STRATA_OP_RELU_BACKWARD, STRATA_OP_SIGMOID_BACKWARD,
    STRATA_OP_TANH_BACKWARD, STRATA_OP_GELU_BACKWARD,
};

/// The special values every float input starts with, then a spread of
/// ordinary ones over many binades.
std::vector<double> float_values(size_t n, unsigned seed) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> v = {std::nan(""), -std::nan(""), inf, -inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 3.5,
                           1e-45, -1e-45, 1e-40, -1e-40, 1.17549435e-38, 6e-8, -6e-8, 1e-5, 65504.0, 65520.0,
                           -65520.0, 3.4e38, -3.4e38, 1e300, 88.7, 89.0, -103.0, -88.0, 709.0, 0.1, -0.1};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> mant(-1.0, 1.0);
  std::uniform_int_distribution<int> exp2(-30, 30);
  while (v.size() < n) v.push_back(std::ldexp(mant(rng), exp2(rng)));
  v.resize(n);
  return v;
}

std::vector<double> int_values(size_t n, strata_dtype dtype, unsigned seed) {
  const double lo = dtype == STRATA_I32 ? -2147483648.0 : -9.2e18, hi = dtype == STRATA_I32 ? 2147483647.0 : 9.2e18;
  std::vector<double> v = {0, 1, -1, 2, -2, 7, -7, lo, hi, 100, -100};
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> small(-1000, 1000);
  while (v.size() < n) v.push_back(small(rng) == 0 ? 3 : small(rng));
  v.resize(n);
  return v;
}

/// Storage bytes of `values` as `dtype`.
std::vector<uint8_t> encode(const std::vector<double>& values, strata_dtype dtype) {
  std::vector<uint8_t> out(values.size() * strata::plugin::dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    const double x = values[i];
    uint8_t* p = out.data() + i * strata::plugin::dtype_size(dtype);
    switch (dtype) {
      case STRATA_F32: { const float f = static_cast<float>(x); std::memcpy(p, &f, 4); break; }
      case STRATA_F64: std::memcpy(p, &x, 8); break;
      case STRATA_BF16: { const uint16_t h = strata::float_to_bf16(static_cast<float>(x)); std::memcpy(p, &h, 2); break; }
      case STRATA_F16: { const uint16_t h = strata::float_to_f16(static_cast<float>(x)); std::memcpy(p, &h, 2); break; }
      case STRATA_I32: { const auto k = static_cast<int32_t>(x); std::memcpy(p, &k, 4); break; }
      case STRATA_I64: { const auto k = static_cast<int64_t>(x); std::memcpy(p, &k, 8); break; }
      case STRATA_BOOL: { const uint8_t b = std::isnan(x) || x != 0.0 ? 1 : 0; *p = b; break; }
      default: break;
    }
  }
  return out;
}

strata_dtype parse_dtype(const std::string& s) {
  for (int d = 0; d < STRATA_DTYPE_COUNT; ++d)
    if (s == strata::plugin::dtype_name(static_cast<strata_dtype>(d))) return static_cast<strata_dtype>(d);
  throw std::runtime_error("unknown dtype " + s);
}

std::vector<strata_dtype> parse_list(const std::string& s) {
  std::vector<strata_dtype> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(parse_dtype(item));
  return out;
}

uint64_t fnv1a(const std::vector<uint8_t>& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t b : bytes) h = (h ^ b) * 1099511628211ull;
  return h;
}

/// A buffer holding `bytes`, viewed as `shape` with `strides`.
struct Operand {
  strata_plugin_state state;
  strata_tensor desc{};
  size_t bytes;
  Operand(strata_plugin_state s, strata_dtype dtype, const std::vector<uint8_t>& data, std::vector<int64_t> shape,
          std::vector<int64_t> strides)
      : state(s), bytes(data.size()) {
    desc.struct_size = sizeof(desc);
    desc.dtype = dtype;
    desc.buffer = alloc_buffer(s, bytes == 0 ? 1 : bytes);
    desc.rank = static_cast<int32_t>(shape.size());
    for (size_t d = 0; d < shape.size(); ++d) {
      desc.shape[d] = shape[d];
      desc.strides[d] = strides[d];
    }
    strata_error err = make_error();
    if (copy_h2d(s, desc.buffer, 0, data.data(), bytes, &err) != STRATA_OK) throw std::runtime_error(err.message);
  }
  ~Operand() { free_buffer(state, desc.buffer); }
  std::vector<uint8_t> read() const {
    std::vector<uint8_t> out(bytes);
    strata_error err = make_error();
    if (copy_d2h(state, out.data(), desc.buffer, 0, bytes, &err) != STRATA_OK) throw std::runtime_error(err.message);
    return out;
  }
};

}  // namespace

int main(int argc, char** argv) {
  const char* options = argc > 1 ? argv[1] : "{}";
  strata_plugin_state state = init_plugin(logging_host(), options);
  std::printf("loops: %s\n", g_loops.c_str());
  strata_error err = make_error();
  strata_device_args dargs = make_args<strata_device_args>(err, state);
  if (plugin_api().get_kernels(&dargs) != STRATA_OK) {
    std::fprintf(stderr, "get_kernels: %s\n", err.message);
    return 1;
  }
  int calls = 0;
  for (int64_t e = 0; e < dargs.n_entries; ++e) {
    const strata_kernel_entry* entry = dargs.entries[e];
    bool wanted = false;
    for (const char* op : kOps) wanted = wanted || std::strcmp(op, entry->op) == 0;
    if (!wanted) continue;
    const std::string sig = entry->signature;
    const size_t arrow = sig.find("->");
    const std::vector<strata_dtype> ins = parse_list(sig.substr(0, arrow));
    const strata_dtype out_dtype = parse_dtype(sig.substr(arrow + 2));
    // Layouts: "flat" 1031 compact elements; "large" 5003 (past the plugin's
    // thresholds for library kernels); "bcast" the last input a broadcast
    // scalar; "transposed" 37 x 29 views of 29 x 37 storage, output compact.
    for (const char* layout : {"flat", "large", "bcast", "transposed"}) {
      const std::string l = layout;
      const int64_t n = l == "large" ? 5003 : l == "transposed" ? 37 * 29 : 1031;
      std::vector<std::unique_ptr<Operand>> operands;
      std::vector<const strata_tensor*> in_desc;
      for (size_t k = 0; k < ins.size(); ++k) {
        const bool is_float = ins[k] == STRATA_F32 || ins[k] == STRATA_F64 || ins[k] == STRATA_BF16 ||
                              ins[k] == STRATA_F16;
        // Inputs differ from each other (seeds), so that binary ops meet
        // NaN against numbers and the like; the condition of where is bool.
        std::vector<double> values = is_float ? float_values(static_cast<size_t>(n), 11 + k)
                                              : int_values(static_cast<size_t>(n), ins[k], 11 + k);
        if (k > 0 && is_float) std::rotate(values.begin(), values.begin() + 7 * static_cast<int64_t>(k), values.end());
        if (l == "bcast" && k + 1 == ins.size() && ins.size() > 1) {
          operands.push_back(std::make_unique<Operand>(state, ins[k], encode({values[3]}, ins[k]),
                                                       std::vector<int64_t>{n}, std::vector<int64_t>{0}));
        } else if (l == "transposed") {
          operands.push_back(std::make_unique<Operand>(state, ins[k], encode(values, ins[k]),
                                                       std::vector<int64_t>{37, 29}, std::vector<int64_t>{1, 37}));
        } else {
          operands.push_back(std::make_unique<Operand>(state, ins[k], encode(values, ins[k]),
                                                       std::vector<int64_t>{n}, std::vector<int64_t>{1}));
        }
        in_desc.push_back(&operands.back()->desc);
      }
      const std::vector<int64_t> shape = l == "transposed" ? std::vector<int64_t>{37, 29} : std::vector<int64_t>{n};
      const std::vector<int64_t> strides = l == "transposed" ? std::vector<int64_t>{29, 1} : std::vector<int64_t>{1};
      Operand output(state, out_dtype,
                     std::vector<uint8_t>(static_cast<size_t>(n) * strata::plugin::dtype_size(out_dtype), 0xAB), shape,
                     strides);
      const strata_tensor* out_desc[] = {&output.desc};
      strata_kernel_call call{};
      strata_error kerr = make_error();
      call.struct_size = sizeof(call);
      call.op = entry->op;
      call.op_version = entry->op_version;
      call.state = state;
      call.user_data = entry->user_data;
      call.inputs = in_desc.data();
      call.n_inputs = static_cast<int32_t>(in_desc.size());
      call.outputs = out_desc;
      call.n_outputs = 1;
      call.host = quiet_host();
      call.error = &kerr;
      const strata_status status = entry->fn(&call);
      std::printf("%s %s %s %d %016" PRIx64 "\n", entry->op, entry->signature, layout, static_cast<int>(status),
                  status == STRATA_OK ? fnv1a(output.read()) : uint64_t{0});
      ++calls;
    }
  }
  std::printf("calls: %d\n", calls);
  plugin_api().shutdown(state);
  std::printf("runs: %s\n", g_runs.c_str());
  return 0;
}
