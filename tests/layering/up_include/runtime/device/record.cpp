// A planted violation for core_layering_refuses_an_upward_include: the
// device sub-layer reaching up into plugins/.
#include "runtime/plugins/host.hpp"
