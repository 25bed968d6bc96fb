// swiglu.hpp — the ops this plugin defines (swiglu.cpp): their schemas,
// shape rules, derivative rules and kernels.
#pragma once

#include "common.hpp"

namespace custom_ops {

/// "custom_ops::swiglu" and "custom_ops::swiglu_backward".
inline constexpr const char* kSwiglu = "custom_ops::swiglu";
inline constexpr const char* kSwigluBackward = "custom_ops::swiglu_backward";
/// Contract version of both ops (the kernels state it in their entries).
inline constexpr uint32_t kOpVersion = 1;

/// Defines both ops through host->register_op. Call from init only.
strata_status register_swiglu_ops(const strata_host_api* host, strata_error* error);

/// Adds the kernels of both ops (f32 and f64) for devices whose memory is
/// `memory` to `table`: custom_ops:0's own table (Memory::own), or the table
/// handed to host->register_kernels for the "cpu" plugin's devices
/// (Memory::cpu). Keep the table until the process exits.
void add_swiglu_kernels(strata::plugin::KernelTable& table, Memory memory);

}  // namespace custom_ops
