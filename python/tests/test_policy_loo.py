"""bench/policy_loo.py --fit on a committed lab run of every config (docs/results/h200_2026-12-05c):
the fitted per-config model's rows are printed, no better than the oracle (the fastest config per
shape) and better than policy.c's cost model on this run, and the run's figures are the ones
docs/results records (the cross-validation's halvings are seeded, so they repeat). From a checkout only: .ci/run
runs it from its clone (copied out of the repository, it skips, saying so)."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "bench", "policy_loo.py")
LAB = os.path.join(ROOT, "docs", "results", "h200_2026-12-05c", "lab_all.csv")


def rows(*args):
    if not (os.path.exists(SCRIPT) and os.path.exists(LAB)):
        pytest.skip(f"SKIPPED LOUDLY: needs the repository's bench/ and docs/results ({ROOT}): these tests run "
                    "outside a checkout")
    out = subprocess.run([sys.executable, SCRIPT, LAB, *args], capture_output=True, text=True, check=True).stdout
    return {m.group(1): (float(m.group(2)), float(m.group(3)))
            for m in re.finditer(r"^\| ([^|]+?) \| ([\d.]+) \| ([\d.]+) \|$", out, re.M)}


def test_fit_rows_sit_between_the_oracle_and_the_cost_model():
    r = rows("--fit")
    oracle, model = r["oracle"][0], r["cost model"][0]
    cv, fitted = r["fitted per config, cross-validated"][0], r["fitted per config, on all shapes"][0]
    assert oracle <= fitted <= cv < model, r
    assert (oracle, model, cv, fitted) == (1.086, 1.124, 1.102, 1.101), r


def test_without_fit_no_fitted_rows():
    r = rows()
    assert "oracle" in r and not any(name.startswith("fitted") for name in r), r
