"""Install the official AsyncAPI parser (@asyncapi/parser, pinned in scripts/asyncapi/package-lock.json)
into scripts/asyncapi/node_modules (git-ignored) unless it is there; `make test` runs it first.
Needs Node.js and npm (and the npm registry, the first time)."""

import shutil
import subprocess
import sys
from pathlib import Path

FOLDER = Path(__file__).resolve().parent / "asyncapi"
INSTALLED = FOLDER / "node_modules" / "@asyncapi" / "parser" / "package.json"


def ensure() -> Path:
    """The validator script, with its parser installed."""
    if not INSTALLED.exists():
        if not (shutil.which("node") and shutil.which("npm")):
            sys.exit("the AsyncAPI check needs Node.js and npm: apt-get install nodejs npm")
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=FOLDER, check=True)
    return FOLDER / "validate.mjs"


if __name__ == "__main__":
    print(f"AsyncAPI parser ready: {ensure()}")
