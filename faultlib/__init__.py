"""The fault library: real processes, the faults injected into them, the scenarios that combine both and the
invariants checked afterwards. The fault tests (tests/e2e/test_faults_*.py) and ``make chaos`` (chaos/run.py)
both use it, and so do the tests of every folder (tests/ and each package's own <package>/tests/): the
fixtures they share (fixtures.py, registered by the root conftest.py) and the helpers that start a web
server or talk HTTP to one (web.py, serve.py, raw_http.py, tcp_proxy.py). The application never imports
it (import-linter; a package's own tests may)."""
