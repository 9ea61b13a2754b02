// The qmoe CLI's subcommand registry. Each tools/cmd_*.cpp registers itself with a static
// Registrar, so adding a subcommand touches one file. Errors are thrown as qmoe::Error and turned
// into "qmoe: error: <message>" + exit code by main.cpp (2 bad input / usage / unsupported,
// 1 verification failed, 0 success).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace qmoe::cli {

struct Command {
  std::string name;
  // Adds the subcommand's options to `sub` and returns the function that runs it (returns the exit code).
  std::function<std::function<int()>(CLI::App& sub)> setup;
  std::string help;
};

std::vector<Command>& registry();

struct Registrar {
  Registrar(std::string name, std::string help, std::function<std::function<int()>(CLI::App&)> setup) {
    registry().push_back({std::move(name), std::move(setup), std::move(help)});
  }
};

}  // namespace qmoe::cli
