"""The fault library: real processes, the faults injected into them, the scenarios that combine both and the
invariants checked afterwards. The fault tests (tests/e2e/test_faults_*.py) and ``make chaos`` (chaos/run.py)
both use it; the application never imports it (import-linter)."""
