// main.cpp — the `strata` command line: version, devices, ops, config check, launch,
// demo, plugin check.
#include "commands.hpp"
#include "plugin_check.hpp"
#include "trace_diff.hpp"

#include <strata/strata.hpp>

#include <CLI/CLI.hpp>

#include <iostream>

int main(int argc, char** argv) {
  using namespace strata::cli;
  CLI::App app{"strata — devices, configuration and demos of the Strata autograd framework"};
  app.require_subcommand(1);
  std::string config_path;
  app.add_option("--config", config_path, "JSON configuration file (else STRATA_CONFIG, else the installed default)")
      ->check(CLI::ExistingFile);

  app.add_subcommand("version", "Print the library and plugin ABI versions");

  DevicesOptions devices_options;
  CLI::App* devices = app.add_subcommand("devices", "List plugins (loaded or refused, with reasons) and devices");
  devices->add_flag("--json", devices_options.json, "Print one JSON object");
  devices->add_flag("--stats", devices_options.stats, "Add allocator statistics, missing kernels and fallback counts");
  devices->add_option("--config", config_path, "JSON configuration file")->check(CLI::ExistingFile);

  OpsOptions ops_options;
  CLI::App* ops = app.add_subcommand("ops", "List the ops (the core's and plugin-defined ones)");
  ops->add_flag("--c-header", ops_options.c_header,
                "Print the SDK header strata/plugin/strata_ops.h (op-name constants for kernel tables)");
  CLI::Option* c_header_flag = ops->get_option("--c-header");
  ops->add_flag("--markdown", ops_options.markdown,
                "Print the op table of docs/ops.md (kind, arity, dtypes, tags, attributes, derivatives, test domain)")
      ->excludes(c_header_flag);
  ops->add_option("--config", config_path, "JSON configuration file")->check(CLI::ExistingFile);

  CLI::App* config = app.add_subcommand("config", "Configuration tools");
  config->require_subcommand(1);
  std::string check_path;
  CLI::App* check = config->add_subcommand("check", "Validate a configuration file");
  check->add_option("file", check_path, "The file to validate")->required();

  std::string demo_device;
  CLI::App* demo = app.add_subcommand("demo", "Run a small matmul and reduction on the selected device");
  demo->add_option("--device", demo_device, "Device id (default: the one the configuration selects)");
  demo->add_option("--config", config_path, "JSON configuration file")->check(CLI::ExistingFile);

  std::string backend_name, backend_dir;
  CLI::App* new_backend =
      app.add_subcommand("new-backend", "Write a plugin project for a new backend, buildable against this SDK");
  new_backend->add_option("name", backend_name, "The backend's name: lower case letters, digits, '_'")->required();
  new_backend->add_option("--dir", backend_dir, "The folder to create (default: NAME); must not exist or be empty");
  CLI::App* plugin = app.add_subcommand("plugin", "Plugin tools");
  plugin->require_subcommand(1);
  PluginWorkerOptions worker_options;
  PluginCheckOptions& check_options = worker_options.check;
  auto add_check_options = [&check_options](CLI::App* cmd) {
    cmd->add_option("path", check_options.path, "The plugin file, libstrata_plugin_<name>.so")->required();
    cmd->add_option("--device", check_options.device, "Device under test (default: the plugin's first device)");
    cmd->add_option("--timeout-ms", check_options.timeout_ms,
                    "Milliseconds a case may run silently before it counts as a hang (default 10000)");
    cmd->add_option("--op", check_options.op_regex, "Only op cases whose op name matches this regular expression");
    cmd->add_flag("--quick", check_options.quick, "Leave out the large shapes (about 1e5 elements)");
  };
  CLI::App* plugin_check = plugin->add_subcommand(
      "check", "Conformance suite: run every claimed kernel against the CPU reference, in a child process");
  add_check_options(plugin_check);
  plugin_check->add_flag("--json", check_options.json, "Print one JSON object (plugin, device, cases, matrix, totals)");
  plugin_check->add_flag("--markdown", check_options.markdown, "Print the op x dtype matrix as Markdown");
  // The worker process of `plugin check` (not for people): hidden.
  CLI::App* plugin_worker = plugin->add_subcommand("check-worker", "Worker process of plugin check");
  plugin_worker->group("");
  add_check_options(plugin_worker);
  plugin_worker->add_option("--event-fd", worker_options.event_fd, "File descriptor for the JSON event lines")->required();
  plugin_worker->add_option("--resume", worker_options.resume, "First case to run");
  plugin_worker->add_option("--skip-cell", worker_options.skip_cells, "op|dtype cells not to run again");
  plugin_worker->add_option("--failed-cell", worker_options.failed_cells, "op|dtype cells that failed a case");
  plugin_worker->add_option("--exclude-kernel", worker_options.exclude_kernels, "device|kernel set aside");
  plugin_worker->add_flag("--pause-before-derivatives", worker_options.pause_before_derivatives,
                          "Stop before the derivative cases after a failure");

  TraceOpsOptions trace_options;
  CLI::App* trace = app.add_subcommand("trace", "Tools for traced programs (Graph::save)");
  TraceFuseOptions fuse_options;
  trace->require_subcommand(0, 1);
  trace->add_option("--explain-fusion", fuse_options.graph,
                    "Run the fusion pass over a graph file and list each fused region and why chains split "
                    "(docs/compile.md)");
  trace->add_flag("--json", fuse_options.json, "With --explain-fusion: print one JSON object");
  trace->add_option("--fused-output", fuse_options.output, "With --explain-fusion: write the fused graph here");
  trace->add_flag("--save-for-backward", fuse_options.save_for_backward,
                  "With --explain-fusion: fuse as compile does for a differentiated call (costly values saved as "
                  "extra outputs for the backward pass)");
  CLI::App* trace_ops = trace->add_subcommand(
      "ops", "The ops a traced program needs on a device (forward and backward), and how the device serves each: "
             "kernel, decomposition or CPU fallback");
  trace_ops->add_option("graph", trace_options.graph, "The graph file (Graph::save)")->required();
  trace_ops->add_option("--device", trace_options.device, "Device id (default: the one the configuration selects)");
  trace_ops->add_flag("--forward-only", trace_options.forward_only, "Run the program forward only");
  trace_ops->add_flag("--json", trace_options.json, "Print one JSON object");
  trace_ops->add_option("--config", config_path, "JSON configuration file")->check(CLI::ExistingFile);

  TraceDiffWorkerOptions diff_worker_options;
  TraceDiffOptions& diff_options = diff_worker_options.diff;
  auto add_diff_options = [&diff_options](CLI::App* cmd) {
    cmd->add_option("graph", diff_options.graph, "The graph file (Graph::save)")->required();
    cmd->add_option("--device", diff_options.device, "Device under test (default: the one the configuration selects)");
    cmd->add_option("--reference", diff_options.reference, "Reference device (default cpu:0)");
    cmd->add_option("--timeout-ms", diff_options.timeout_ms,
                    "Milliseconds a check may run silently before it counts as a hang (default 10000)");
    cmd->add_option("--rtol", diff_options.rtol, "Relative tolerance for every floating dtype (default: per dtype)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--atol", diff_options.atol,
                    "Absolute tolerance for every floating dtype, times the largest magnitude of the reference "
                    "tensor when above 1 (default: per dtype)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_flag("--forward-only", diff_options.forward_only, "Check the forward pass only");
  };
  CLI::App* trace_diff = trace->add_subcommand(
      "diff", "Check every op of a traced program on a device against a reference device, forward and backward, "
              "and name the first op that departs (in child processes: crashes and hangs are named too)");
  add_diff_options(trace_diff);
  trace_diff->add_flag("--json", diff_options.json, "Print one JSON object");
  trace_diff->add_option("--config", diff_options.config, "JSON configuration file (passed to the workers)")
      ->check(CLI::ExistingFile);
  CLI::App* diff_worker = trace->add_subcommand("diff-worker", "Worker process of trace diff");
  diff_worker->group("");
  add_diff_options(diff_worker);
  diff_worker->add_option("--config", diff_options.config, "JSON configuration file")->check(CLI::ExistingFile);
  diff_worker->add_flag("--pause-before-backward", diff_worker_options.pause_before_backward,
                        "Stop at the first backward check");
  diff_worker->add_option("--exclude-kernel", diff_worker_options.exclude_kernels, "Kernel of the device set aside");
  diff_worker->add_option("--skip-node", diff_worker_options.skip_nodes, "Node whose backward check is skipped");
  diff_worker->add_option("--event-fd", diff_worker_options.event_fd, "File descriptor for the JSON event lines")
      ->required();
  diff_worker->add_option("--resume", diff_worker_options.resume, "First check to run");

  LaunchOptions launch_options;
  CLI::App* launch = app.add_subcommand(
      "launch", "Run N ranks of a distributed program here, or on each of --hosts, output prefixed \"[rank k] \" "
                "(docs/distributed.md)");
  launch->add_option("-n,--nprocs", launch_options.nprocs, "Number of ranks (processes)")->required();
  launch->add_option("--master-port", launch_options.master_port,
                     "STRATA_MASTER_PORT for the ranks (default: a free port; required with --nnodes > 1)");
  launch->add_option("--nnodes", launch_options.nnodes,
                     "Nodes taking part; run launch once on each (world size = nnodes x N)");
  launch->add_option("--node-rank", launch_options.node_rank, "This node's index, 0..nnodes-1 (node 0 hosts rank 0)");
  launch->add_option("--master-addr", launch_options.master_addr,
                     "Address of node 0, where rank 0 serves the TCP store (default 127.0.0.1; required with --nnodes > 1)");
  launch->add_option("--hosts", launch_options.hosts,
                     "Comma-separated hosts: start node k's launch on host k through --launcher (node 0's host "
                     "serves the store unless --master-addr says otherwise; --master-port defaults to 29500)");
  launch->add_option("--max-restarts", launch_options.max_restarts,
                     "When a rank fails, stop every rank and start them all again, at most this many times "
                     "(one node; each attempt gets STRATA_RESTART_COUNT)");
  launch->add_option("--launcher", launch_options.launcher,
                     "Remote shell for --hosts, run as LAUNCHER HOST COMMAND (default \"ssh -o BatchMode=yes\")");
  // PROGRAM and everything after it go to the program, options included.
  launch->prefix_command();
  launch->footer("PROGRAM ARGS...: the program each rank runs (searched in PATH), with its arguments.\n"
                 "Each rank gets STRATA_RANK, STRATA_WORLD_SIZE, STRATA_MASTER_ADDR, STRATA_MASTER_PORT and\n"
                 "STRATA_JOB_TOKEN (a random secret per run, or launch's own STRATA_JOB_TOKEN).\n"
                 "Exit status: the first failing rank's (128+signal when killed), 127 when PROGRAM cannot run.");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kOk : kBadInput;
  }

  try {
    if (check->parsed()) return run_config_check(check_path);
    if (new_backend->parsed()) return run_new_backend(backend_name, backend_dir);
    // Never touches the runtime: the ranks load their own.
    if (launch->parsed()) {
      launch_options.command = launch->remaining();
      return run_launch(launch_options);
    }
    // The parent never touches the runtime: the plugin is loaded only by its workers.
    if (plugin_check->parsed()) return run_plugin_check(check_options);
    if (plugin_worker->parsed()) return run_plugin_check_worker(worker_options);
    if (trace_diff->parsed()) {
      if (diff_options.config.empty()) diff_options.config = config_path;  // `strata --config F trace diff`
      return run_trace_diff(diff_options);
    }
    // Configures the runtime itself (with the kernels it sets aside).
    if (diff_worker->parsed()) return run_trace_diff_worker(diff_worker_options);
    if (!config_path.empty()) strata::runtime().load_config(config_path);
    if (app.got_subcommand("version")) {
      std::cout << "strata " << strata::version() << " (plugin ABI " << strata::abi_version() << ")\n";
      return kOk;
    }
    if (devices->parsed()) return run_devices(devices_options);
    if (ops->parsed()) return run_ops(ops_options);
    if (demo->parsed()) return run_demo(demo_device);
    if (trace_ops->parsed()) return run_trace_ops(trace_options);
    if (trace->parsed()) {
      if (fuse_options.graph.empty()) {
        std::cerr << "strata: trace: give a subcommand (ops, diff) or --explain-fusion GRAPH\n";
        return kBadInput;
      }
      return run_trace_fuse(fuse_options);
    }
  } catch (const strata::ConfigError& e) {
    std::cerr << "strata: configuration error: " << e.what() << "\n";
    return kBadInput;
  } catch (const strata::Error& e) {
    std::cerr << "strata: " << e.what() << "\n";
    return kFailure;
  } catch (const std::exception& e) {  // a bug in Strata: still a message, not an abort
    std::cerr << "strata: internal error: " << e.what() << "\n";
    return kFailure;
  }
  return kOk;
}
