// check_skips — holds the skips of a test run against the checked-in list
// of expected skips (tests/expected-skips.json; docs/testing.md, "Expected
// skips"). A skip is a decision, not an outcome: CTest's "expected_skips"
// runs this after every other test and it fails when
//
//   1. a case skipped (or left dtypes out) and no entry of the list whose
//      condition holds on this machine matches it: a skip nobody chose;
//   2. an entry whose condition holds matches a case that ran without
//      skipping: the listed skip stopped, and the list must say so;
//   3. a device that is available ran none of a suite's cases (every one it
//      ran skipped, and it ran all of them): the guard of the device
//      fixture, which a single case per process cannot apply itself.
//
// The conditions are decided here, from this machine, never from the test's
// own message: "device-missing cuda:0" holds when the runtime has no cuda:0
// and STRATA_REQUIRED_DEVICES does not list it, "device-lacks vulkan:0 f64"
// when vulkan:0 is available and its own dtype list lacks f64, "root" when
// running as root, "device-lacks-kernel vulkan:0 linear" when the device
// has no kernel of the op (it decomposes there, per its own kernel list),
// "software-device vulkan:0" when vulkan:0 is a CPU
// (lavapipe), "library-missing libnccl.so.2" when the library does not
// load. "$device" in a condition stands for the case's device parameter
// ("Devices/Binary.Add/vulkan_0" -> vulkan:0), or for a case without one
// the default device it ran on (STRATA_TEST_DEVICE). A reason made of parts
// joined by "; " (one per dtype a device does not store) needs an entry for
// every part.
//
// Usage: check_skips <expected-skips.json> <results folder> [--config <file>]
// The outcomes are what tests/common/test_main.cpp recorded.
#include <strata/strata.hpp>

#include <dlfcn.h>
#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct Outcome {
  std::string program, name, status, reason;
  int peers = 1;
  std::string device;  // the default device when the case ended ("" when unknown)
  std::string id() const { return program + ":" + name; }
};

struct Entry {
  std::string tests;   // glob over "<program>:<Suite.Case>"
  std::string reason;  // substring the recorded reason must hold ("" = any)
  std::string when;    // the condition
  std::string why;     // for people
  int index = 0;
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, sep)) out.push_back(part);
  return out;
}

std::vector<Outcome> read_outcomes(const fs::path& dir) {
  std::vector<Outcome> out;
  if (!fs::is_directory(dir)) return out;
  for (const fs::directory_entry& f : fs::directory_iterator(dir)) {
    if (f.path().extension() != ".tsv") continue;
    std::ifstream in(f.path());
    std::string line;
    while (std::getline(in, line)) {
      std::vector<std::string> cols = split(line, '\t');
      if (cols.size() < 5) continue;
      Outcome o{cols[0], cols[1], cols[2], cols[3], std::atoi(cols[4].c_str()), cols.size() > 5 ? cols[5] : ""};
      out.push_back(std::move(o));
    }
  }
  // Several processes may run one case (a threaded suite runs its cases
  // again): keep each case's worst outcome once.
  std::map<std::string, Outcome> by_id;
  for (Outcome& o : out) {
    auto [it, fresh] = by_id.emplace(o.id(), o);
    if (!fresh && o.status == "failed") it->second = o;
    if (!fresh && o.status == "skipped" && it->second.status == "passed") it->second = o;
  }
  out.clear();
  for (auto& [id, o] : by_id) out.push_back(std::move(o));
  return out;
}

std::vector<Entry> read_list(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot read " + file.string());
  nlohmann::json doc = nlohmann::json::parse(in);
  std::vector<Entry> out;
  int i = 0;
  for (const nlohmann::json& e : doc.at("skips")) {
    Entry entry{e.at("tests").get<std::string>(), e.value("reason", ""), e.at("when").get<std::string>(),
                e.at("why").get<std::string>(), i++};
    const std::string kind = entry.when.substr(0, entry.when.find(' '));
    static const std::set<std::string> kinds = {"root", "device-missing", "device-lacks", "device-lacks-kernel",
                                                "software-device", "library-missing"};
    if (kinds.count(kind) == 0) {
      throw std::runtime_error(file.string() + ": /skips/" + std::to_string(entry.index) +
                               "/when: unknown condition \"" + entry.when + "\"");
    }
    out.push_back(std::move(entry));
  }
  return out;
}

/// "Devices/Binary.Add/cpu_0" -> "cpu:0" (the device parameter of a case
/// name); "" for a name without one ("Ops/HigherOrder.X/add_a_broadcast").
std::string device_of(const std::string& name) {
  const size_t slash = name.rfind('/');
  if (slash == std::string::npos) return "";
  std::string id = name.substr(slash + 1);
  const size_t us = id.rfind('_');
  // A device parameter ends in "_<index>"; "add_a_broadcast" is an op case.
  if (us == std::string::npos || us + 1 == id.size() ||
      id.find_first_not_of("0123456789", us + 1) != std::string::npos) {
    return "";
  }
  id[us] = ':';
  return id;
}

/// Decides the conditions of the list on this machine.
class Machine {
 public:
  explicit Machine(std::vector<std::string> required) : required_(std::move(required)) {
    for (const strata::DeviceInfo& d : strata::runtime().devices()) devices_[d.id] = d;
  }

  /// Whether `when` holds; throws on a condition it does not know.
  bool holds(const std::string& when) const {
    std::vector<std::string> w = split(when, ' ');
    if (w.empty()) throw std::runtime_error("empty condition");
    const std::string& what = w[0];
    auto arg = [&](size_t i) -> const std::string& {
      if (w.size() <= i) throw std::runtime_error("condition \"" + when + "\" lacks an argument");
      return w[i];
    };
    if (what == "root") return ::geteuid() == 0;
    if (what == "device-missing") return !available(arg(1)) && !required(arg(1));
    if (what == "device-lacks") {
      auto it = devices_.find(arg(1));
      if (it == devices_.end()) return false;
      const strata::DType t = strata::dtype_from_name(arg(2));
      return std::find(it->second.dtypes.begin(), it->second.dtypes.end(), t) == it->second.dtypes.end();
    }
    if (what == "device-lacks-kernel") {  // device-lacks-kernel <id> <op>: no kernel of the op (it decomposes)
      auto it = devices_.find(arg(1));
      if (it == devices_.end()) return false;
      const std::string op = arg(2).find("::") == std::string::npos ? "strata::" + arg(2) : arg(2);
      return std::none_of(it->second.kernels.begin(), it->second.kernels.end(),
                          [&](const strata::KernelInfo& k) { return k.op == op; });
    }
    if (what == "software-device") {
      auto it = devices_.find(arg(1));
      return it != devices_.end() && it->second.type == strata::DeviceType::cpu && arg(1).rfind("cpu:", 0) != 0;
    }
    if (what == "library-missing") {
      void* h = ::dlopen(arg(1).c_str(), RTLD_LAZY | RTLD_LOCAL);
      if (h != nullptr) ::dlclose(h);
      return h == nullptr;
    }
    throw std::runtime_error("unknown condition \"" + when + "\"");
  }

  bool available(const std::string& id) const { return devices_.count(id) > 0; }
  bool required(const std::string& id) const {
    return std::find(required_.begin(), required_.end(), id) != required_.end();
  }

 private:
  std::vector<std::string> required_;
  std::map<std::string, strata::DeviceInfo> devices_;
};

/// The entry's condition for outcome `o` ("$device" replaced by the case's
/// device parameter, else by the default device it ran on).
std::string condition_for(const Entry& e, const Outcome& o) {
  std::string when = e.when;
  const size_t at = when.find("$device");
  if (at != std::string::npos) {
    const std::string param = device_of(o.name);
    when.replace(at, 7, param.empty() ? o.device : param);
  }
  return when;
}

/// The parts of a skip reason: "a; b" -> {"a", "b"}; a partial run's
/// "dtypes: " prefix dropped.
std::vector<std::string> reason_parts(std::string reason) {
  if (reason.rfind("dtypes: ", 0) == 0) reason.erase(0, 8);
  std::vector<std::string> parts;
  for (size_t start = 0; start <= reason.size();) {
    const size_t sep = std::min(reason.find("; ", start), reason.size());
    parts.push_back(reason.substr(start, sep - start));
    start = sep + 2;
  }
  return parts;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: check_skips <expected-skips.json> <results folder> [--config <file>]\n");
    return 2;
  }
  try {
    if (argc >= 5 && std::string(argv[3]) == "--config") strata::runtime().load_config(argv[4]);
    const std::vector<Entry> list = read_list(argv[1]);
    const std::vector<Outcome> outcomes = read_outcomes(argv[2]);
    if (outcomes.empty()) {
      std::printf("check_skips: no outcomes recorded in %s: nothing ran, nothing to check\n", argv[2]);
      return 0;
    }
    const char* req = std::getenv("STRATA_REQUIRED_DEVICES");
    std::vector<std::string> required;
    for (const std::string& id : split(req != nullptr ? req : "", ',')) {
      if (!id.empty()) required.push_back(id);
    }
    const Machine machine(required);
    std::map<std::string, bool> decided;  // condition -> holds
    auto applies = [&](const Entry& e, const Outcome& o) {
      const std::string when = condition_for(e, o);
      auto it = decided.find(when);
      if (it == decided.end()) it = decided.emplace(when, machine.holds(when)).first;
      return it->second;
    };
    auto covers = [](const Entry& e, const Outcome& o) {
      return ::fnmatch(e.tests.c_str(), o.id().c_str(), 0) == 0;
    };

    int failures = 0, skipped = 0, partial = 0;
    std::map<int, int> used;  // entry -> cases it explained
    for (const Outcome& o : outcomes) {
      const bool skip = o.status == "skipped";
      const bool left_out_dtypes = o.status == "passed" && o.reason.rfind("dtypes: ", 0) == 0;
      skipped += skip;
      partial += left_out_dtypes;
      if (skip || left_out_dtypes) {
        std::set<int> explained_by;
        for (const std::string& part : reason_parts(o.reason)) {
          const Entry* explained = nullptr;
          for (const Entry& e : list) {
            if (!covers(e, o) || (!e.reason.empty() && part.find(e.reason) == std::string::npos)) continue;
            if (!applies(e, o)) continue;
            explained = &e;
            break;
          }
          if (explained != nullptr) {
            explained_by.insert(explained->index);
            continue;
          }
          ++failures;
          std::printf("UNEXPECTED %s %s: %s\n  (no entry of the expected-skip list whose condition holds here "
                      "explains it: fix the cause, or add an entry naming the condition)\n",
                      skip ? "SKIP" : "DTYPES LEFT OUT", o.id().c_str(), part.c_str());
        }
        for (int index : explained_by) ++used[index];
        continue;
      }
      if (o.status != "passed") continue;
      // A case that ran in full, matched by an entry that lists it whatever
      // the reason: if the entry applies here, the skip it lists stopped.
      for (const Entry& e : list) {
        if (!e.reason.empty() || !covers(e, o) || !applies(e, o)) continue;
        ++failures;
        std::printf("STOPPED SKIPPING %s: the list expects a skip here (entry %d, \"%s\" when %s)\n",
                    o.id().c_str(), e.index, e.tests.c_str(), condition_for(e, o).c_str());
      }
    }

    // A device that is available and ran none of a suite's cases.
    std::map<std::string, std::pair<int, int>> per_suite_device;  // -> {recorded, skipped}
    std::map<std::string, int> peers;
    for (const Outcome& o : outcomes) {
      const std::string device = device_of(o.name);
      if (device.empty() || !machine.available(device)) continue;
      const std::string key = o.program + ":" + o.name.substr(0, o.name.find('.')) + " on " + device;
      auto& [recorded, all_skipped] = per_suite_device[key];
      ++recorded;
      all_skipped += o.status == "skipped";
      peers[key] = o.peers;
    }
    for (const auto& [key, counts] : per_suite_device) {
      if (counts.first == peers[key] && counts.second == counts.first && counts.first > 1) {
        ++failures;
        std::printf("NOTHING RAN %s: the device is available but skipped all %d cases\n", key.c_str(), counts.first);
      }
    }

    std::printf("\n%zu outcomes: %d skipped, %d with dtypes left out; cases each entry explained:\n",
                outcomes.size(), skipped, partial);
    for (const Entry& e : list) {
      std::printf("  %5d  %-32s %s%s\n", used[e.index], e.when.c_str(), e.tests.c_str(),
                  e.reason.empty() ? "" : (" (\"" + e.reason + "\")").c_str());
    }
    if (failures > 0) {
      std::printf("check_skips: %d problem%s (tests/expected-skips.json; docs/testing.md, \"Expected skips\")\n",
                  failures, failures == 1 ? "" : "s");
      return 1;
    }
    std::printf("check_skips: every skip is on the list\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "check_skips: %s\n", e.what());
    return 2;
  }
}
