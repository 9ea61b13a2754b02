// qmoe: the command-line tool. Subcommands live in tools/cmd_*.cpp (gen, inspect, verify, bench, run).
#include <cstdio>
#include <map>

#include "commands.h"
#include "qmoe/error.h"

#ifndef QMOE_VERSION
#define QMOE_VERSION "0.0.0"
#endif

namespace qmoe::cli {
std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}
}  // namespace qmoe::cli

int main(int argc, char** argv) {
  using namespace qmoe;
  CLI::App app{"qmoe: quantized Mixture-of-Experts layers from published checkpoints, on CPU and GPU"};
  app.set_version_flag("--version", std::string("qmoe ") + QMOE_VERSION);
  app.require_subcommand(1);
  std::map<CLI::App*, std::function<int()>> runners;
  for (auto& c : cli::registry()) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    runners[sub] = c.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "qmoe: error: %s (see qmoe --help)\n", e.what());
    return 2;
  }
  try {
    for (auto& [sub, run] : runners)
      if (sub->parsed()) return run();
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "qmoe: error: %s\n", e.what());
    return e.kind() == ErrorKind::kVerifyFailed ? 1 : e.kind() == ErrorKind::kInternal ? 3 : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qmoe: error: internal: %s\n", e.what());
    return 3;
  }
}
