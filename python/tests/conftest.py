"""Shared fixtures: the `qmoe gen` CLI (checkpoints for the loader tests) and a seeded RNG.

The CLI is found in $QMOE_BUILD_DIR (scripts/python_tests.sh sets it) or on PATH; without it the
checkpoint tests skip and say so.
"""
import os
import shutil
import subprocess

import numpy as np
import pytest


def _qmoe_cli():
    build = os.environ.get("QMOE_BUILD_DIR")
    if build:
        cand = os.path.join(os.path.abspath(build), "qmoe")
        if os.access(cand, os.X_OK):
            return cand
    return shutil.which("qmoe")


@pytest.fixture(scope="session")
def gen(tmp_path_factory):
    """gen(arch, format, **options) -> path of a `qmoe gen` checkpoint (cached per arguments)."""
    cli = _qmoe_cli()
    if cli is None:
        pytest.skip("the qmoe CLI was not found (set QMOE_BUILD_DIR to a build with the qmoe target)")
    made = {}

    def make(arch, fmt, **opts):
        key = (arch, fmt, tuple(sorted(opts.items())))
        if key not in made:
            out = tmp_path_factory.mktemp(f"{arch}_{fmt}")
            args = [cli, "gen", "--arch", arch, "--format", fmt, "--out", str(out / "ckpt")]
            for k, v in opts.items():
                args += ["--" + k.replace("_", "-"), str(v)]
            subprocess.run(args, check=True, capture_output=True, text=True)
            made[key] = str(out / "ckpt")
        return made[key]

    return make


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
