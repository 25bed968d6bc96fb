// commands.hpp — subcommands of the `strata` command line.
#pragma once

#include <strata/graph.hpp>

#include <optional>
#include <string>
#include <vector>

namespace strata::cli {

/// Exit codes: 0 success, 1 runtime failure, 2 bad input (arguments, config).
inline constexpr int kOk = 0;
inline constexpr int kFailure = 1;
inline constexpr int kBadInput = 2;

struct DevicesOptions {
  bool json = false;
  bool stats = false;
};

struct OpsOptions {
  bool c_header = false;
  bool markdown = false;  // the op table of docs/ops.md
};

int run_devices(const DevicesOptions& options);
int run_ops(const OpsOptions& options);
int run_config_check(const std::string& path);
int run_demo(const std::string& device);
/// `strata new-backend NAME [--dir DIR]` (new_backend.cpp).
int run_new_backend(const std::string& name, const std::string& dir);

/// Loads a traced graph (Graph::save) for a `strata trace` command; on a bad
/// file prints "strata: WHO: " and what is wrong (the file, the JSON path)
/// and returns nothing: the command exits with kBadInput (trace_ops.cpp).
std::optional<strata::Graph> load_traced_graph(const std::string& path, const char* who);

/// `strata trace ops GRAPH [--device D] [--forward-only] [--json]` (trace_ops.cpp).
struct TraceOpsOptions {
  std::string graph;   // a file Graph::save wrote
  std::string device;  // "": the default device
  bool forward_only = false;
  bool json = false;
};
int run_trace_ops(const TraceOpsOptions& options);

/// `strata trace --explain-fusion GRAPH [--json] [--fused-output FILE]` (trace_fuse.cpp).
struct TraceFuseOptions {
  std::string graph;   // a file Graph::save wrote
  std::string output;  // "": do not write the fused graph
  bool json = false;
  bool save_for_backward = false;  // FuseOptions::save_for_backward
};
int run_trace_fuse(const TraceFuseOptions& options);

/// `strata launch -n N [--nnodes K --node-rank R --master-addr A]
/// [--master-port P] PROGRAM ARGS...`, or `strata launch -n N --hosts
/// H0,H1,... [--launcher CMD] [--master-port P] PROGRAM ARGS...` (launch.cpp).
struct LaunchOptions {
  int nprocs = 0;                    // ranks on this node
  int nnodes = 1;                    // nodes (hosts); world size = nnodes * nprocs
  int node_rank = 0;                 // this node: its ranks are node_rank * nprocs + local
  std::string master_addr;           // "": 127.0.0.1 (one node); required with nnodes > 1
  int master_port = -1;              // -1: a free port (one node), 29500 (--hosts)
  std::string hosts;                 // "a,b,c": start node k on host k through `launcher`
  std::string launcher = "ssh -o BatchMode=yes";  // remote shell: LAUNCHER HOST COMMAND
  std::vector<std::string> command;  // PROGRAM ARGS...
  int max_restarts = 0;              // restart every rank when one fails, at most this often (one node)
};
/// Exit status: the first failing rank's (128 + signal for a signal), 127
/// when the program cannot be started, 2 for bad arguments, else 0.
int run_launch(const LaunchOptions& options);

}  // namespace strata::cli
