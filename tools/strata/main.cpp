// main.cpp — the `strata` command line: version, devices, ops, config check, demo.
#include "commands.hpp"

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

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kOk : kBadInput;
  }

  try {
    if (check->parsed()) return run_config_check(check_path);
    if (new_backend->parsed()) return run_new_backend(backend_name, backend_dir);
    if (!config_path.empty()) strata::runtime().load_config(config_path);
    if (app.got_subcommand("version")) {
      std::cout << "strata " << strata::version() << " (plugin ABI " << strata::abi_version() << ")\n";
      return kOk;
    }
    if (devices->parsed()) return run_devices(devices_options);
    if (ops->parsed()) return run_ops(ops_options);
    if (demo->parsed()) return run_demo(demo_device);
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
