// strata-plugin-probe — the child process in which the runtime probes a
// plugin before loading it (core/src/runtime/plugins/plugin_probe.hpp). It lives in
// <prefix>/libexec/strata/ and is started by libstrata.so, not by hand.
#include "runtime/plugins/plugin_probe.hpp"

int main(int argc, char** argv) { return strata::detail::plugin_probe_main(argc, argv); }
