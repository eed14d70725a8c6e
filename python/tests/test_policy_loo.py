"""bench/policy_loo.py on the committed lab run that gemm_configs.h's cost model was fitted on (the
run its AGMM_GEMM_FITTED comment names, under docs/results): --fit-table prints exactly the committed
rows; the cost model is then as good as the fit on all shapes, no better than the oracle (the fastest
config per shape) and no worse than the cross-validated fit; and the run's figures are the ones
docs/results records (the cross-validation's halvings are seeded, so they repeat). From a checkout
only: .ci/run runs it from its clone (copied out of the repository, it skips, saying so)."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "bench", "policy_loo.py")
CONFIGS = os.path.join(ROOT, "src", "kernels", "gemm", "gemm_configs.h")


def fitted_on():
    """gemm_configs.h's AGMM_GEMM_FITTED comment and rows, and the lab run it names."""
    if not (os.path.exists(SCRIPT) and os.path.exists(CONFIGS)):
        pytest.skip(f"SKIPPED LOUDLY: needs the repository's bench/, src/ and docs/results ({ROOT}): these tests "
                    "run outside a checkout")
    text = open(CONFIGS).read()
    block = text[text.rindex("/* The cost model"):]
    lab = re.search(r"Fitted: the run of the measured table \((docs/results/\S+\.csv)", block.replace("\n *", ""))
    assert lab, "AGMM_GEMM_FITTED's comment names the lab run it was fitted on"
    rows = re.findall(r'X\("[^"]+", [\d.]+, [\d.]+, [\d.]+\)', block)
    return rows, os.path.join(ROOT, lab.group(1))


def run(lab, *args):
    return subprocess.run([sys.executable, SCRIPT, lab, *args], capture_output=True, text=True, check=True).stdout


def figures(out):
    return {m.group(1): (float(m.group(2)), float(m.group(3)))
            for m in re.finditer(r"^\| ([^|]+?) \| ([\d.]+) \| ([\d.]+) \|$", out, re.M)}


def test_fit_table_is_the_committed_one():
    rows, lab = fitted_on()
    printed = re.findall(r'X\("[^"]+", [\d.]+, [\d.]+, [\d.]+\)', run(lab, "--fit-table"))
    assert rows and printed == rows


def test_cost_model_is_the_fit_on_all_shapes():
    _, lab = fitted_on()
    r = figures(run(lab, "--fit"))
    oracle, model = r["oracle"][0], r["cost model"][0]
    cv, fitted = r["fitted, cross-validated"][0], r["fitted on all shapes"][0]
    assert oracle <= model == fitted <= cv, r
    assert (oracle, model, cv) == (1.086, 1.095, 1.097), r


def test_without_fit_no_fitted_rows():
    _, lab = fitted_on()
    r = figures(run(lab))
    assert "oracle" in r and "cost model" in r and not any(name.startswith("fitted") for name in r), r
