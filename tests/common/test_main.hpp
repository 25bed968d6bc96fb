// test_main.hpp — what test_main.cpp (the main() of every GoogleTest
// program in tests/) lets other parts of a test program hook into.
#pragma once

#include <string>

namespace strata_test {

/// Runs after GoogleTest parsed its flags and before the first case (null:
/// nothing). test_device.cpp sets it in programs that link the runtime.
extern void (*before_tests)();

/// The runtime's default device when a case ends ("vulkan:0"), recorded
/// with the case's outcome (null, or "": a program without the runtime).
/// test_device.cpp sets it.
extern std::string (*default_device)();

}  // namespace strata_test
