"""The numpy examples run as written: agmm.numpy's module docstring, and docs/python.md's "numpy and
the CPU world" (from a checkout; copied out of the repository, that one skips, saying so)."""
import os
import re
import textwrap

import numpy as np
import pytest

import agmm.numpy as anp

DOCS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "python.md"))


def run_example(code):
    namespace = {"__name__": "example"}
    exec(compile(code, "example", "exec"), namespace)
    return namespace


def test_the_module_docstring_example_runs():
    doc = anp.__doc__
    # The indented example: from its first line to the prose after it.
    block = doc[doc.index("    import numpy as np, agmm.numpy as anp"):doc.index("\nnumpy has no bfloat16")]
    namespace = run_example(textwrap.dedent(block))
    results = namespace["results"]
    assert len(results) == 4 and all(c.shape == (32, 24) and c.dtype == np.float32 for c in results)
    assert all(np.array_equal(c, results[0]) for c in results), "every rank gathers the same A"


def test_the_docs_example_runs():
    if not os.path.exists(DOCS):
        pytest.skip(f"SKIPPED LOUDLY: needs the repository's docs ({DOCS}): these tests run outside a checkout")
    with open(DOCS) as f:
        text = f.read()
    section = text.split("\n## numpy and the CPU world\n", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace = run_example(code)
    results = namespace["results"]
    assert len(results) == 4 and all(np.array_equal(c, results[0]) for c in results)
