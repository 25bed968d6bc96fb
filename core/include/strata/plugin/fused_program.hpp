// fused_program.hpp — the program of strata::fused_elementwise (docs/ops.md,
// "Fused elementwise programs"), header-only, for the core and for any
// plugin that implements the op. Depends on the C++ standard library only.
//
// A program is SSA over the op set's elementwise vocabulary. Its text, the
// op's "program" attribute, is one statement per line:
//
//   in 2                    the program reads inputs %0 and %1
//   %2 = mul %0 %1          each statement defines the next value
//   %3 = sin %2
//   %4 = add %3 0x1p-1      an operand is a value or a constant (hex float, exact)
//   out %4                  the outputs (1 to 6 values), last line
//
// Every value has the shape the inputs broadcast to and the inputs' dtype
// (the op takes inputs of one float dtype); a constant is a scalar of that
// dtype. Each statement means what the op of that name means on tensors, so
// a program evaluated statement by statement with the op set's kernels is
// the reference result; a fused kernel must give the same values (the CPU
// plugin gives the same bits).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <strata/plugin/fused_ops.hpp>
#include <vector>

namespace strata::plugin::fused {

/// An operand: value `value`, or (value < 0) the constant `constant`.
struct Operand {
  int32_t value = -1;
  double constant = 0.0;
  bool is_constant() const { return value < 0; }
};

/// One statement: defines value n_inputs + its index.
struct Statement {
  Op op = Op::neg;
  Operand a, b;  // b unused for unary ops
};

struct Program {
  int32_t n_inputs = 0;
  std::vector<Statement> body;
  std::vector<int32_t> outputs;

  int32_t n_values() const { return n_inputs + static_cast<int32_t>(body.size()); }
  /// Appends a statement and returns the value it defines.
  int32_t add(Op op, Operand a, Operand b = {}) {
    body.push_back({op, a, b});
    return n_values() - 1;
  }

  /// The text form (parse() reads it back exactly).
  std::string text() const {
    std::string s = "in " + std::to_string(n_inputs) + "\n";
    auto operand = [](const Operand& o) {
      if (!o.is_constant()) return "%" + std::to_string(o.value);
      char buf[40];
      std::snprintf(buf, sizeof buf, "%a", o.constant);
      return std::string(buf);
    };
    for (size_t k = 0; k < body.size(); ++k) {
      const Statement& st = body[k];
      s += "%" + std::to_string(n_inputs + static_cast<int32_t>(k)) + " = " + name(st.op) + " " + operand(st.a);
      if (arity(st.op) == 2) s += " " + operand(st.b);
      s += "\n";
    }
    s += "out";
    for (int32_t v : outputs) s += " %" + std::to_string(v);
    return s;
  }

  /// Parses and checks a program; on failure returns false with `error`
  /// naming the line and what is wrong. Outputs are statements' values
  /// (never an input itself), so a kernel always writes fresh memory.
  static bool parse(std::string_view text, Program& out, std::string& error) {
    out = Program{};
    std::vector<std::string_view> lines;
    for (size_t at = 0; at <= text.size();) {
      size_t end = text.find('\n', at);
      if (end == std::string_view::npos) end = text.size();
      std::string_view line = text.substr(at, end - at);
      if (!line.empty()) lines.push_back(line);
      at = end + 1;
    }
    auto fail = [&](size_t line, const std::string& why) {
      error = "program line " + std::to_string(line + 1) + ": " + why;
      return false;
    };
    auto words = [](std::string_view line) {
      std::vector<std::string_view> w;
      for (size_t at = 0; at < line.size();) {
        while (at < line.size() && line[at] == ' ') ++at;
        size_t end = line.find(' ', at);
        if (end == std::string_view::npos) end = line.size();
        if (end > at) w.push_back(line.substr(at, end - at));
        at = end;
      }
      return w;
    };
    auto value_of = [&](std::string_view w, int32_t defined, int32_t& v) {
      if (w.size() < 2 || w[0] != '%') return false;
      int64_t n = 0;
      for (char c : w.substr(1)) {
        if (c < '0' || c > '9' || n > 1000000) return false;
        n = n * 10 + (c - '0');
      }
      if (n >= defined) return false;
      v = static_cast<int32_t>(n);
      return true;
    };
    if (lines.size() < 2) return fail(0, "a program has an 'in' line, statements and an 'out' line");
    std::vector<std::string_view> w = words(lines.front());
    if (w.size() != 2 || w[0] != "in") return fail(0, "expected 'in <inputs>'");
    const int n = std::atoi(std::string(w[1]).c_str());
    if (n < 1 || n > kMaxInputs || std::to_string(n) != w[1]) {
      return fail(0, "the inputs must be 1 to " + std::to_string(kMaxInputs) + ", got '" + std::string(w[1]) + "'");
    }
    out.n_inputs = n;
    for (size_t k = 1; k + 1 < lines.size(); ++k) {
      w = words(lines[k]);
      const int32_t defined = out.n_values();
      if (w.size() < 4 || w[1] != "=" || w[0] != "%" + std::to_string(defined)) {
        return fail(k, "expected '%" + std::to_string(defined) + " = <op> <operand> [<operand>]'");
      }
      Op op;
      if (!op_named(w[2], op)) return fail(k, "'" + std::string(w[2]) + "' is no op of the fused vocabulary");
      if (static_cast<int>(w.size()) != 3 + arity(op)) {
        return fail(k, std::string(name(op)) + " takes " + std::to_string(arity(op)) + " operand(s)");
      }
      Operand ops[2];
      for (int j = 0; j < arity(op); ++j) {
        std::string_view t = w[3 + static_cast<size_t>(j)];
        if (t[0] == '%') {
          if (!value_of(t, defined, ops[j].value)) {
            return fail(k, "operand '" + std::string(t) + "' is no value defined before");
          }
        } else {
          const std::string s(t);
          char* end = nullptr;
          ops[j].constant = std::strtod(s.c_str(), &end);
          if (end != s.c_str() + s.size()) return fail(k, "operand '" + s + "' is neither a value nor a number");
        }
      }
      if (ops[0].is_constant() && (arity(op) == 1 || ops[1].is_constant())) {
        return fail(k, "a statement needs at least one value operand");
      }
      out.body.push_back({op, ops[0], ops[1]});
    }
    w = words(lines.back());
    if (w.empty() || w[0] != "out") return fail(lines.size() - 1, "the last line must be 'out <values>'");
    if (w.size() < 2 || w.size() > 1 + kMaxOutputs) {
      return fail(lines.size() - 1, "1 to " + std::to_string(kMaxOutputs) + " outputs");
    }
    for (size_t j = 1; j < w.size(); ++j) {
      int32_t v;
      if (!value_of(w[j], out.n_values(), v)) {
        return fail(lines.size() - 1, "output '" + std::string(w[j]) + "' is no value of the program");
      }
      if (v < out.n_inputs) {
        return fail(lines.size() - 1, "output '" + std::string(w[j]) + "' is an input; outputs are statements' values");
      }
      out.outputs.push_back(v);
    }
    return true;
  }
};

/// Programs parsed once per distinct text (a kernel sees the same few over
/// and over). Thread-safe; holds at most `capacity` programs and starts
/// over when full, so a stream of distinct programs cannot grow it without
/// bound (a caller keeps its program alive through the shared_ptr).
class ProgramCache {
 public:
  explicit ProgramCache(size_t capacity = 1024) : capacity_(capacity) {}
  /// The parsed program, or nullptr with `error` naming the line.
  std::shared_ptr<const Program> get(std::string_view text, std::string& error) {
    std::lock_guard lock(mutex_);
    if (auto it = programs_.find(text); it != programs_.end()) return it->second;
    auto p = std::make_shared<Program>();
    if (!Program::parse(text, *p, error)) return nullptr;
    if (programs_.size() >= capacity_) programs_.clear();
    programs_.emplace(std::string(text), p);
    return p;
  }

 private:
  size_t capacity_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const Program>, std::less<>> programs_;
};

/// The program of `text` (a kernel's "program" attribute) from one cache
/// per library: nullptr with `error` naming the line when it is malformed.
inline std::shared_ptr<const Program> cached_program(std::string_view text, std::string& error) {
  static auto* cache = new ProgramCache();  // leaked: outlives static teardown
  return cache->get(text, error);
}

}  // namespace strata::plugin::fused
