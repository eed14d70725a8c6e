"""bench/policy_loo.py on the committed lab runs that gemm_configs.h's cost models were fitted on (the
run each AGMM_GEMM_FITTED_<device> comment names, under docs/results): --fit-table prints exactly the
committed rows; each cost model is then as good as the fit on all shapes, no better than the oracle
(the fastest config per shape) and no worse than the cross-validated fit; and the runs' figures are
the ones docs/results records (the cross-validation's halvings are seeded, so they repeat). From a
checkout only: .ci/run runs it from its clone (copied out of the repository, it skips, saying so)."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "bench", "policy_loo.py")
CONFIGS = os.path.join(ROOT, "src", "kernels", "gemm", "gemm_configs.h")
ROW = r'X\("[^"]+", [\d.]+, [\d.]+, [\d.]+\)'
# device: (oracle, cost model = fit on all shapes, cross-validated), engine / best cuBLAS, geomeans
FIGURES = {"H100": (1.059, 1.079, 1.079), "H200": (1.059, 1.070, 1.071)}


def fitted_on(device):
    """AGMM_GEMM_FITTED_<device>'s rows, and the lab run its comment names."""
    if not (os.path.exists(SCRIPT) and os.path.exists(CONFIGS)):
        pytest.skip(f"SKIPPED LOUDLY: needs the repository's bench/, src/ and docs/results ({ROOT}): these tests "
                    "run outside a checkout")
    text = open(CONFIGS).read()
    comment = text[text.rindex("/* The cost model"):].replace("\n *", "")
    lab = re.search(rf"{device} fitted: the run of the measured table \((docs/results/\S+\.csv)", comment)
    assert lab, f"the cost model's comment names the lab run {device}'s table was fitted on"
    body = re.search(rf"#define AGMM_GEMM_FITTED_{device}\(X\)(.*?)(?:\n\n|\Z)", text, re.S).group(1)
    return re.findall(ROW, body), os.path.join(ROOT, lab.group(1))


def run(lab, *args):
    return subprocess.run([sys.executable, SCRIPT, lab, *args], capture_output=True, text=True, check=True).stdout


def figures(out):
    return {m.group(1): (float(m.group(2)), float(m.group(3)))
            for m in re.finditer(r"^\| ([^|]+?) \| ([\d.]+) \| ([\d.]+) \|$", out, re.M)}


@pytest.mark.parametrize("device", sorted(FIGURES))
def test_fit_table_is_the_committed_one(device):
    rows, lab = fitted_on(device)
    printed = run(lab, "--fit-table", "--device", device)
    assert printed.startswith(f"#define AGMM_GEMM_FITTED_{device}(X)")
    assert rows and re.findall(ROW, printed) == rows


@pytest.mark.parametrize("device", sorted(FIGURES))
def test_cost_model_is_the_fit_on_all_shapes(device):
    _, lab = fitted_on(device)
    r = figures(run(lab, "--fit", "--device", device))
    oracle, model = r["oracle"][0], r["cost model"][0]
    cv, fitted = r["fitted, cross-validated"][0], r["fitted on all shapes"][0]
    assert oracle <= model == fitted <= cv, r
    assert (oracle, model, cv) == FIGURES[device], r


def test_without_fit_no_fitted_rows():
    _, lab = fitted_on("H200")
    r = figures(run(lab))
    assert "oracle" in r and "cost model" in r and not any(name.startswith("fitted") for name in r), r
