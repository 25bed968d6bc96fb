// trace_format.cpp — the strata-graph JSON file of a traced Graph: writing it
// (Graph::save, and the text Graph::to_json shows) and reading it back with
// checks that name the source and the JSON path (Graph::load, Graph::from_json).
#include "autograd/trace/trace_internal.hpp"

#include "base/config_internal.hpp"
#include "runtime/dispatch/op.hpp"

#include <strata/error.hpp>
#include <strata/graph.hpp>

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace strata {

namespace {

using Json = nlohmann::json;

const char* attr_kind_name(GraphAttr::Kind k) {
  switch (k) {
    case GraphAttr::Kind::integer: return "int";
    case GraphAttr::Kind::real: return "float";
    case GraphAttr::Kind::integers: return "ints";
    case GraphAttr::Kind::flag: return "bool";
    case GraphAttr::Kind::dtype: return "dtype";
    case GraphAttr::Kind::reals: return "floats";
    case GraphAttr::Kind::text: return "string";
    case GraphAttr::Kind::scalar_int: return "scalar_int";
    case GraphAttr::Kind::scalar_real: return "scalar_float";
  }
  return "int";
}

Json program_json(const Graph& g) {
  Json j{{"format", "strata-graph"}, {"version", 1}, {"traced", true}, {"outputs", g.outputs}};
  Json inputs = Json::array();
  for (size_t k = 0; k < g.input_dtypes.size(); ++k) {
    inputs.push_back({{"dtype", std::string(dtype_name(g.input_dtypes[k]))}, {"shape", g.input_shapes[k]}});
  }
  j["inputs"] = inputs;
  Json constants = Json::array();
  for (const GraphConstant& c : g.constants) {
    Json e{{"value", c.value}, {"dtype", std::string(dtype_name(c.dtype))}, {"shape", c.shape}};
    if (c.dtype == DType::i32 || c.dtype == DType::i64) {
      e["data"] = c.ints;
    } else {
      e["data"] = c.data;
    }
    constants.push_back(std::move(e));
  }
  j["constants"] = constants;
  Json nodes = Json::array();
  for (const GraphNode& n : g.nodes) {
    Json attrs = Json::array();
    for (const GraphAttr& a : n.attrs) {
      Json e{{"name", a.name}, {"kind", attr_kind_name(a.kind)}};
      if (a.kind == GraphAttr::Kind::real || a.kind == GraphAttr::Kind::scalar_real) {
        e["value"] = a.f;
      } else if (a.kind == GraphAttr::Kind::integers) {
        e["value"] = a.ints;
      } else if (a.kind == GraphAttr::Kind::reals) {
        e["value"] = a.reals;
      } else if (a.kind == GraphAttr::Kind::text) {
        e["value"] = a.text;
      } else {
        e["value"] = a.i;
      }
      attrs.push_back(std::move(e));
    }
    Json node{{"id", n.id},
              {"op", n.op},
              {"inputs", n.inputs},
              {"outputs", n.outputs},
              {"output_shapes", n.output_shapes},
              {"attrs", attrs}};
    if (n.no_grad) node["no_grad"] = true;  // absent: false (files written before it replay as they did)
    nodes.push_back(std::move(node));
  }
  j["nodes"] = nodes;
  return j;
}

/// Reads JSON with errors that name the source and the JSON path.
class Reader {
 public:
  using Json = detail::config::Json;  // the strict reader's document (duplicate keys refused)

  explicit Reader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    detail::graph_load_error(source_, path, what);
  }
  /// The document, parsed strictly: syntax errors name line and column,
  /// duplicate keys their JSON path.
  Json parse(const std::string& text) const {
    try {
      return detail::config::parse_document(text, source_);
    } catch (const ConfigError& e) {
      throw Error(std::string("graph ") + e.what());
    }
  }
  const Json& at(const Json& j, const std::string& path, const char* key) const {
    if (!j.is_object() || !j.contains(key)) fail(path, std::string("missing key \"") + key + "\"");
    return j.at(key);
  }
  int64_t integer(const Json& j, const std::string& path) const {
    if (!j.is_number_integer()) fail(path, "expected an integer, found " + j.dump());
    if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      fail(path, "expected an integer within int64, found " + j.dump());
    }
    return j.get<int64_t>();
  }
  std::vector<int64_t> integers(const Json& j, const std::string& path) const {
    if (!j.is_array()) fail(path, "expected an array of integers");
    std::vector<int64_t> out;
    for (size_t k = 0; k < j.size(); ++k) out.push_back(integer(j[k], path + "/" + std::to_string(k)));
    return out;
  }
  DType dtype(const Json& j, const std::string& path) const {
    if (!j.is_string()) fail(path, "expected a dtype name");
    try {
      return dtype_from_name(j.get<std::string>());
    } catch (const Error& e) {
      fail(path, e.what());
    }
  }

 private:
  std::string source_;
};

/// One attribute of a node, at JSON path `pa`.
GraphAttr read_attr(const Reader& r, const Reader::Json& ja, const std::string& pa) {
  GraphAttr a;
  const Json& name = r.at(ja, pa, "name");
  const Json& kind = r.at(ja, pa, "kind");
  const Json& value = r.at(ja, pa, "value");
  if (!name.is_string()) r.fail(pa + "/name", "expected a string");
  a.name = name.get<std::string>();
  std::string kn = kind.is_string() ? kind.get<std::string>() : "";
  if (kn == "int" || kn == "bool" || kn == "dtype" || kn == "scalar_int") {
    a.kind = kn == "int"    ? GraphAttr::Kind::integer
             : kn == "bool" ? GraphAttr::Kind::flag
             : kn == "dtype" ? GraphAttr::Kind::dtype
                             : GraphAttr::Kind::scalar_int;
    a.i = r.integer(value, pa + "/value");
    if (a.kind == GraphAttr::Kind::flag && a.i != 0 && a.i != 1) r.fail(pa + "/value", "expected 0 or 1");
    if (a.kind == GraphAttr::Kind::dtype && !is_dtype_value(a.i)) {
      r.fail(pa + "/value", std::string(detail::kDTypeValuesExpected));
    }
  } else if (kn == "float" || kn == "scalar_float") {
    a.kind = kn == "float" ? GraphAttr::Kind::real : GraphAttr::Kind::scalar_real;
    if (!value.is_number()) r.fail(pa + "/value", "expected a number");
    a.f = value.get<double>();
  } else if (kn == "ints") {
    a.kind = GraphAttr::Kind::integers;
    a.ints = r.integers(value, pa + "/value");
  } else if (kn == "floats") {
    a.kind = GraphAttr::Kind::reals;
    if (!value.is_array()) r.fail(pa + "/value", "expected an array of numbers");
    for (size_t e = 0; e < value.size(); ++e) {
      if (!value[e].is_number()) r.fail(pa + "/value/" + std::to_string(e), "expected a number");
      a.reals.push_back(value[e].get<double>());
    }
  } else if (kn == "string") {
    a.kind = GraphAttr::Kind::text;
    if (!value.is_string()) r.fail(pa + "/value", "expected a string");
    a.text = value.get<std::string>();
  } else {
    r.fail(pa + "/kind",
           "expected \"int\", \"float\", \"ints\", \"bool\", \"dtype\", \"floats\", \"string\", "
           "\"scalar_int\" or \"scalar_float\"");
  }
  return a;
}

/// One constant, at JSON path `p`: its value id, dtype, shape and numbers.
GraphConstant read_constant(const Reader& r, const Reader::Json& jc, const std::string& p, const std::string& source) {
  GraphConstant c;
  c.value = r.integer(r.at(jc, p, "value"), p + "/value");
  c.dtype = r.dtype(r.at(jc, p, "dtype"), p + "/dtype");
  c.shape = r.integers(r.at(jc, p, "shape"), p + "/shape");
  const Json& data = r.at(jc, p, "data");
  int64_t numel = detail::check_graph_shape(c.shape, source, p + "/shape");
  // A complex constant holds (real, imaginary) pairs.
  const int64_t numbers = is_complex(c.dtype) ? 2 * numel : numel;
  if (!data.is_array() || static_cast<int64_t>(data.size()) != numbers) {
    r.fail(p + "/data", "expected " + std::to_string(numbers) + " numbers for " +
                            std::string(dtype_name(c.dtype)) + detail::shape_string(c.shape) +
                            (is_complex(c.dtype) ? " ((real, imaginary) pairs)" : ""));
  }
  for (size_t e = 0; e < data.size(); ++e) {
    const Json& v = data[e];
    if (!v.is_number()) r.fail(p + "/data/" + std::to_string(e), "expected a number");
    if (c.dtype == DType::i32 || c.dtype == DType::i64) {
      c.ints.push_back(r.integer(v, p + "/data/" + std::to_string(e)));
    } else {
      c.data.push_back(v.get<double>());
    }
  }
  return c;
}

}  // namespace

namespace detail {
std::string program_to_json(const Graph& g) { return program_json(g).dump(1); }
}  // namespace detail

void Graph::save(const std::filesystem::path& path) const {
  if (!traced) throw Error("Graph::save: only graphs made by trace() can be saved and replayed");
  for (const GraphNode& n : nodes) {
    if (n.op == detail::kGuardOp) {
      throw Error("Graph::save: node #" + std::to_string(n.id) +
                  " is a guard of strata::compile (the function read a value on the host while it was traced); "
                  "a graph with guards replays only inside its compiled function");
    }
  }
  const Graph savable = detail::savable_graph(*this);  // before the file is touched
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error("Graph::save: cannot open " + path.string() + " for writing");
  out << program_json(savable).dump(1) << '\n';
  out.close();
  if (!out) throw Error("Graph::save: writing " + path.string() + " failed");
}

Graph Graph::load(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("Graph::load: cannot open " + path.string());
  std::stringstream text;
  text << in.rdbuf();
  return from_json(text.str(), path.string());
}

Graph Graph::from_json(const std::string& text, const std::string& source) {
  Reader r(source);
  Json j = r.parse(text);
  auto is = [&j](const char* key, const Json& want) { return j.is_object() && j.contains(key) && j[key] == want; };
  if (!is("format", "strata-graph")) r.fail("/format", "not a strata-graph file");
  if (r.integer(r.at(j, "", "version"), "/version") != 1) r.fail("/version", "unsupported version (this build reads 1)");
  if (!is("traced", true)) r.fail("/traced", "expected true (an inspection graph is not a traced program)");
  Graph g;
  g.traced = true;
  int64_t defined = 0;  // values are numbered in definition order
  const Json& inputs = r.at(j, "", "inputs");
  if (!inputs.is_array()) r.fail("/inputs", "expected an array");
  for (size_t k = 0; k < inputs.size(); ++k) {
    std::string p = "/inputs/" + std::to_string(k);
    g.input_dtypes.push_back(r.dtype(r.at(inputs[k], p, "dtype"), p + "/dtype"));
    g.input_shapes.push_back(r.integers(r.at(inputs[k], p, "shape"), p + "/shape"));
    detail::check_graph_shape(g.input_shapes.back(), source, p + "/shape");
    ++defined;
  }
  const Json& constants = r.at(j, "", "constants");
  const Json& nodes = r.at(j, "", "nodes");
  if (!constants.is_array()) r.fail("/constants", "expected an array");
  if (!nodes.is_array()) r.fail("/nodes", "expected an array");
  // Values are numbered 0..count-1 (inputs, then constants and node outputs
  // in the order trace() met them), each defined once.
  size_t count = inputs.size() + constants.size();
  for (const Json& jn : nodes) {
    if (jn.is_object() && jn.contains("outputs") && jn["outputs"].is_array()) count += jn["outputs"].size();
  }
  std::vector<bool> is_defined(static_cast<size_t>(defined), true);
  auto define = [&](int64_t id, const std::string& p) {
    if (id < 0 || static_cast<size_t>(id) >= count) {
      r.fail(p, "value id " + std::to_string(id) + " out of range (the file defines " + std::to_string(count) +
                    " values, numbered from 0)");
    }
    if (static_cast<size_t>(id) >= is_defined.size()) is_defined.resize(static_cast<size_t>(id) + 1, false);
    if (is_defined[static_cast<size_t>(id)]) r.fail(p, "value " + std::to_string(id) + " defined twice");
    is_defined[static_cast<size_t>(id)] = true;
  };
  for (size_t k = 0; k < constants.size(); ++k) {
    std::string p = "/constants/" + std::to_string(k);
    GraphConstant c = read_constant(r, constants[k], p, source);
    define(c.value, p + "/value");
    g.constants.push_back(std::move(c));
  }
  for (size_t k = 0; k < nodes.size(); ++k) {
    std::string p = "/nodes/" + std::to_string(k);
    const Json& jn = nodes[k];
    GraphNode n;
    n.id = static_cast<uint64_t>(k);
    const Json& op = r.at(jn, p, "op");
    if (!op.is_string()) r.fail(p + "/op", "expected an op name");
    n.op = op.get<std::string>();
    if (detail::find_op(n.op) == nullptr) r.fail(p + "/op", "unknown op \"" + n.op + "\" (not in this build's op set)");
    n.inputs = r.integers(r.at(jn, p, "inputs"), p + "/inputs");
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      int64_t v = n.inputs[i];
      if (v < 0 || static_cast<size_t>(v) >= is_defined.size() || !is_defined[static_cast<size_t>(v)]) {
        r.fail(p + "/inputs/" + std::to_string(i), "value " + std::to_string(v) + " is used before it is defined");
      }
    }
    n.outputs = r.integers(r.at(jn, p, "outputs"), p + "/outputs");
    for (size_t i = 0; i < n.outputs.size(); ++i) define(n.outputs[i], p + "/outputs/" + std::to_string(i));
    const Json& shapes = r.at(jn, p, "output_shapes");
    if (!shapes.is_array() || shapes.size() != n.outputs.size()) {
      r.fail(p + "/output_shapes", "expected one shape per output (" + std::to_string(n.outputs.size()) + ")");
    }
    for (size_t i = 0; i < shapes.size(); ++i) {
      n.output_shapes.push_back(r.integers(shapes[i], p + "/output_shapes/" + std::to_string(i)));
    }
    const Json& attrs = r.at(jn, p, "attrs");
    if (!attrs.is_array()) r.fail(p + "/attrs", "expected an array");
    for (size_t i = 0; i < attrs.size(); ++i) {
      n.attrs.push_back(read_attr(r, attrs[i], p + "/attrs/" + std::to_string(i)));
    }
    if (jn.contains("no_grad")) {
      if (!jn["no_grad"].is_boolean()) r.fail(p + "/no_grad", "expected true or false");
      n.no_grad = jn["no_grad"].get<bool>();
    }
    g.nodes.push_back(std::move(n));
  }
  g.outputs = r.integers(r.at(j, "", "outputs"), "/outputs");
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    int64_t v = g.outputs[i];
    if (v < 0 || static_cast<size_t>(v) >= is_defined.size() || !is_defined[static_cast<size_t>(v)]) {
      r.fail("/outputs/" + std::to_string(i), "value " + std::to_string(v) + " is never defined");
    }
  }
  detail::check_graph_program(g, source);
  return g;
}

}  // namespace strata
