"""bench/bench_ratios.py, each backend over the engine alone and over nccl from an agmm-bench CSV: on a
made-up CSV whose ratios are known (a row that did not run and a missing engine time left out), and on
the committed H200 run of the twenty-fifth session, whose fused ÷ engine docs/results records (1.024,
worst 1.093 at 1024^3). From a checkout only (copied out of the repository, it skips, saying so)."""
import csv
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "bench", "bench_ratios.py")
RUN = os.path.join(ROOT, "docs", "results", "h200_2026-12-06j", "ag_matmul_w1.csv")
FIELDS = ["op", "world", "nranks", "m", "n", "k", "dtype", "backend", "state", "median_us", "engine_us"]


def need_checkout():
    if not (os.path.exists(SCRIPT) and os.path.exists(RUN)):
        pytest.skip(f"SKIPPED LOUDLY: needs the repository's bench/ and docs/results ({ROOT}): these tests run "
                    "outside a checkout")


def table(path):
    """{backend: (shapes, ÷ engine geomean, worst, worst shape, ÷ nccl geomean)} of the first group."""
    out = subprocess.run([sys.executable, SCRIPT, path], capture_output=True, text=True, check=True).stdout
    rows = {}
    for m in re.finditer(r"^\| (\w+) \| (\d+) \| ([\d.]+|-) \| (?:([\d.]+) \((\S+)\)|-) \| ([\d.]+|-) \|$", out, re.M):
        name, shapes, geo, worst, shape, nccl = m.groups()
        rows.setdefault(name, (int(shapes), geo, worst, shape, nccl))
    return rows


def test_made_up_run(tmp_path):
    need_checkout()
    path = tmp_path / "bench.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS, restval="bf16")
        w.writeheader()
        for m, nccl_us, fused_us, engine_us in ((256, 20.0, 11.0, 10.0), (512, 40.0, 40.0, 40.0)):
            w.writerow(dict(op="ag_matmul", world="gpu", nranks=1, m=m, n=m, k=m, backend="nccl", state="ok",
                            median_us=nccl_us, engine_us=engine_us))
            w.writerow(dict(op="ag_matmul", world="gpu", nranks=1, m=m, n=m, k=m, backend="fused", state="ok",
                            median_us=fused_us, engine_us=engine_us))
        # neither counts: a row that failed, and one without the engine's time (only ÷ nccl)
        w.writerow(dict(op="ag_matmul", world="gpu", nranks=1, m=256, n=256, k=256, backend="pull", state="fail",
                        median_us=1.0, engine_us=10.0))
        w.writerow(dict(op="ag_matmul", world="gpu", nranks=1, m=512, n=512, k=512, backend="pull", state="ok",
                        median_us=20.0, engine_us="nan"))
    rows = table(str(path))
    # fused: 1.1 and 1.0 of the engine (geomean sqrt(1.1)), 0.55 and 1.0 of nccl (sqrt(0.55))
    assert rows["fused"] == (2, "1.049", "1.100", "256x256x256", "0.742"), rows
    assert rows["pull"] == (1, "-", None, None, "0.500"), rows


def test_committed_h200_run():
    need_checkout()
    rows = table(RUN)
    assert rows["fused"] == (31, "1.024", "1.093", "1024x1024x1024", "0.879"), rows
    assert rows["nccl"][4] == "1.000", rows


def timing_line(path):
    out = subprocess.run([sys.executable, SCRIPT, path], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line.startswith(("Timed", "Timing"))]


def test_timing_line(tmp_path):
    """Each heading says how its rows were timed: in turns, partly alone, or not recorded (the committed
    run predates the turns)."""
    need_checkout()
    fields = FIELDS + ["turns", "alone"]
    for alone_512, want in (("0", "Timed in turns (5 rounds): every shape"),
                            ("1", "Timed in turns (5 rounds), but 1 of 2 shapes held one backend at a time")):
        path = tmp_path / f"turns_{alone_512}.csv"
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fields, restval="bf16")
            w.writeheader()
            for m, alone in ((256, "0"), (512, alone_512)):
                for backend in ("nccl", "fused"):
                    w.writerow(dict(op="ag_matmul", world="gpu", nranks=1, m=m, n=m, k=m, backend=backend,
                                    state="ok", median_us=10.0, engine_us=10.0, turns=5, alone=alone))
        lines = timing_line(str(path))
        assert len(lines) == 1 and lines[0].startswith(want), lines
    assert timing_line(RUN)[0].startswith("Timing not recorded"), timing_line(RUN)
