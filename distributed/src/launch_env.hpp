// launch_env.hpp — launch_env.cpp's parts that tests reach.
#pragma once

#include <optional>
#include <string>

namespace strata::distributed::detail {

/// NAME's integer value, nullopt when unset or empty; a DistributedError
/// naming it when it is not an integer or beyond an int.
std::optional<int> env_integer(const char* name);

/// The first host of a Slurm host list ("node[07-09,12],gpu3" -> "node07");
/// empty for text that is not one.
std::string first_slurm_host(const std::string& list);

}  // namespace strata::distributed::detail
