"""``make run-split``: one deployment per installed context, each on a database of its own, all
on one broker, started together with honcho until Ctrl-C.

The deployments follow ``INSTALLED_CONTEXTS`` (config/settings.py): each is the service ``make service``
builds for its context (scripts/build_service.py, under ``<var-dir>/services/``, built afresh), run with
this checkout's virtual environment (the same pinned versions; its ``.venv`` links to it) and its tree's
Procfile, the web server runserver (development). The fake card gateway runs from this checkout,
beside payments' database.
For a context ``name``:
``<NAME>_DATABASE_URL`` (default ``sqlite:///var/split/<name>.sqlite3``) and ``<NAME>_PORT``
(default ``PORT`` + its place in the list) choose its database and port; ``BROKER_URL`` is
shared (default: one filesystem broker under ``var/split/``).

    python scripts/run_split.py [--port 8000] [--var-dir var/split] [--procfile-only]
"""

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[1]
SPLIT_VAR = BASE_DIR / "var" / "split"
sys.path.insert(0, str(BASE_DIR))
from scripts.build_service import build  # noqa: E402 - run as a script: the repository's root first


def tree_processes(tree: Path, port: int) -> dict[str, str]:
    """The tree's Procfile: process -> its command, the web tier runserver on ``port``."""
    processes = {}
    for line in (tree / "Procfile").read_text().splitlines():
        name, sep, command = line.partition(": exec ")
        if sep and not line.startswith("#"):
            processes[name] = command
    return processes | {"web": f"python manage.py runserver 127.0.0.1:{port} --noreload"}


def deployments(first_port: int, var_dir: Path, environ: dict[str, str]) -> list[dict]:
    """Each installed context's deployment, its service built: name, tree, environment, port, the
    commands it runs."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from reliable_messaging.hosting import installed

    result = []
    for place, declaration in enumerate(installed()):
        prefix = declaration.name.upper()
        port = int(environ.get(f"{prefix}_PORT") or first_port + place)
        url = environ.get(f"{prefix}_DATABASE_URL") or f"sqlite:///{var_dir / declaration.name}.sqlite3"
        tree = var_dir / "services" / declaration.name
        shutil.rmtree(tree, ignore_errors=True)
        build(declaration.name, tree)
        # It runs with this checkout's environment (the same pins as its requirements.txt), at the
        # path a deployment's printed commands name (.venv/bin/python) in the tree as here.
        (tree / ".venv").symlink_to(BASE_DIR / ".venv")
        result.append(
            {
                "name": declaration.name,
                "tree": tree,
                "port": port,
                "url": url,
                "env": {"CONTEXTS": declaration.name, "DATABASE_URL": url},
                "processes": tree_processes(tree, port),
                "api": declaration.urls,
                # commands an operator runs by hand (not those run when preparing it or as its processes)
                "commands": [
                    c
                    for c in declaration.commands
                    if (c,) not in declaration.setup and c not in {p.split()[0] for p in declaration.processes.values()}
                ],
            }
        )
    return result


def procfile(split: list[dict]) -> str:
    lines = ["# Written by scripts/run_split.py (make run-split): each installed context's service and its Procfile."]
    for deployment in split:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in deployment["env"].items())
        for process, command in deployment["processes"].items():
            lines.append(
                f"{deployment['name']}-{process}: cd {shlex.quote(str(deployment['tree']))} && {env} exec {command}"
            )
        if deployment["name"] == "payments":
            # The fake card gateway payments calls: a development service of this checkout (its ledger beside
            # payments' database, as under make run), on GATEWAY_PORT.
            lines.append(f"fake-gateway: {env} exec python manage.py run_fake_gateway")
    return "\n".join(lines) + "\n"


def by_hand(deployment: dict, command: str, broker: str) -> str:
    """A command as pasted in a clean shell, in ``deployment``."""
    env = f"DEBUG=1 CONTEXTS={deployment['name']} DATABASE_URL={deployment['url']} "
    return env + (f"BROKER_URL={broker} " if broker else "") + f".venv/bin/python manage.py {command}"


def banner(split: list[dict], broker: str, port: int) -> list[str]:
    lines = [""]
    for deployment in split:
        what = "the API, its docs, its admin" if deployment["api"] else "its admin, /metrics, /readyz"
        page = "api/products/" if deployment["api"] else "admin/"
        lines.append(f"  {deployment['name']:10} ({what}): http://127.0.0.1:{deployment['port']}/{page}")
    first = split[0]
    lines += ["  Each deployment has its own admin users, e.g. for " + first["name"] + ":"]
    lines += ["      " + by_hand(first, "createsuperuser", broker)]
    # The example runs as pasted: payments' ledger needs no argument (orders' erase_customer needs an id).
    with_commands = sorted((d for d in split if d["commands"]), key=lambda d: d["name"] != "payments")
    if example := next(iter(with_commands), None):
        lines += [
            "  A command by hand takes its deployment's CONTEXTS and DATABASE_URL (an SQLite database has its",
            f"  own files beside it), e.g. {example['name']}' {example['commands'][0]} and dead letters:",
            "      " + by_hand(example, example["commands"][0], broker),
            "      " + by_hand(example, "dead_letters list", broker),
        ]
    if any(d["name"] == "payments" for d in split):
        gateway = os.environ.get("GATEWAY_PORT") or "8090"
        lines += [f"  Gateway: the fake card gateway on http://127.0.0.1:{gateway}/ (GATEWAY_PORT)"]
    demo_port = f" PORT={port}" if port != 8000 else ""
    lines += [f"  The guided demo, from another terminal: make demo SPLIT=1{demo_port}", ""]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT") or 8000), help="the first deployment's")
    parser.add_argument("--var-dir", type=Path, default=SPLIT_VAR, help="SQLite files and the filesystem broker")
    parser.add_argument("--procfile-only", action="store_true", help="print the Procfile, prepare and start nothing")
    args = parser.parse_args()
    var_dir = args.var_dir.resolve()
    # Every deployment gets its CONTEXTS from here; the settings read while planning need DEBUG.
    os.environ.pop("CONTEXTS", None)
    os.environ.setdefault("DEBUG", "1")
    os.environ.setdefault("VAR_DIR", str(var_dir))
    split = deployments(args.port, var_dir, dict(os.environ))
    # Every deployment knows the others' databases: its order page prints commands that run as pasted.
    # Each tree's manage.py names its own settings module (the checkout's, the monolith's): none is inherited.
    environ = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    environ |= {f"{d['name'].upper()}_DATABASE_URL": d["url"] for d in split}
    text = procfile(split)
    if args.procfile_only:
        sys.stdout.write(text)
        return 0

    var_dir.mkdir(parents=True, exist_ok=True)
    for deployment in split:
        prepare = [sys.executable, "manage.py", "prepare_deployment"]
        subprocess.run(prepare, cwd=deployment["tree"], env={**environ, **deployment["env"]}, check=True)
    path = var_dir / "Procfile"
    path.write_text(text)
    print("\n".join(banner(split, os.environ.get("BROKER_URL", ""), args.port)), flush=True)
    # Ctrl-C reaches honcho too (the terminal signals the whole group), which stops every process
    # and answers 130 even when each exited 0. This process only waits for it: dying of Ctrl-C
    # would make make say "Interrupt". (A handler, unlike ignoring it, is not inherited by honcho.)
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    api = next((d for d in split if d["api"]), split[0])
    announce = [sys.executable, str(BASE_DIR / "scripts" / "announce_ready.py"), "--label", "make run-split"]
    if any(d["name"] == "payments" for d in split):  # its fake card gateway is part of the split
        announce += ["--also", f"http://127.0.0.1:{os.environ.get('GATEWAY_PORT') or '8090'}/healthz"]
    subprocess.Popen([*announce, "--port", str(api["port"]), "--parent", str(os.getpid())])
    honcho = ["honcho", "start", "-f", str(path), "-d", str(BASE_DIR)]
    code = subprocess.run(honcho, cwd=BASE_DIR, env=environ).returncode
    return 0 if code == 130 else code


if __name__ == "__main__":
    sys.exit(main())
