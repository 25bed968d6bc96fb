// test_cases.hpp — a plugin's strata.test_cases extension (ABI 2.4) read
// and checked into host values: what plugin_test_cases() (runtime/
// plugin_cases.cpp) returns for a loaded plugin, and what fuzz_test_cases
// drives with fuzzed structs.
#pragma once

#include <strata/plugin/strata_plugin.h>
#include <strata/plugin_cases.hpp>

#include <string>
#include <vector>

namespace strata::detail {

/// The cases of the extension `ext` (the strata.test_cases extension of the
/// plugin `plugin`, which names it in errors; nullptr: none). Never throws
/// for a malformed extension or case: each becomes a case whose `error`
/// names the field; reads nothing past what a count or size declares.
std::vector<PluginTestCase> read_test_cases(const strata_extension* ext, const std::string& plugin);

}  // namespace strata::detail
