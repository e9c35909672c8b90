"""The layering the code relies on: the domain and the use cases know nothing of
HTTP or SQL, so they can be used and tested without either."""
from __future__ import annotations

import subprocess
import sys

import pytest

DOMAIN_AND_USE_CASES = ["uws.domain.phases", "uws.domain.model", "uws.domain.errors",
                        "uws.domain.services", "uws.domain.parameters",
                        "uws.usecases.holds",
                        "uws.domain.timeutil", "uws.domain.estimates", "uws.usecases.jobs",
                        "uws.usecases.sweeps",
                        "uws.usecases.waiting", "uws.usecases.ports", "uws.domain.batchmodel",
                        "uws.usecases.batches",
                        "uws.usecases.creating"]


@pytest.mark.parametrize("framework", ["sqlalchemy", "flask"])
def test_importing_the_domain_and_the_use_cases_loads_no(framework):
    program = (f"import sys\nimport {', '.join(DOMAIN_AND_USE_CASES)}\n"
               f"print(sorted(m for m in sys.modules if m.split('.')[0] == {framework!r}))")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
