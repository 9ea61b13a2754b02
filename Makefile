# The two commands of the README:
#   make demo   build + run the main job (gen tiny checkpoints, inspect, verify, forward, bench)
#   make test   build + run every test (ctest; GPU tests skip without a GPU and say so)
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps build test demo clean gpu-test

all: build

deps:
	@bash scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@nvidia-smi -L >/dev/null 2>&1 || echo "note: no CUDA device on this machine: the GPU tests listed as 'Skipped' above did not run (scripts/gpu_tests.sh runs them on a GPU machine); the CUDA code was compiled"
	@bash scripts/python_tests.sh $(BUILD)

demo: build
	@bash scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD)
