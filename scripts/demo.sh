#!/usr/bin/env bash
# The demo: generate tiny checkpoints, inspect, verify, run the MoE forward, bench.
set -euo pipefail
BUILD=${1:-build}
Q=$BUILD/qmoe
$Q --version
