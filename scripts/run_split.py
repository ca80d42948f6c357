"""``make run-split``: one deployment per installed context, each on a database of its own, all
on one broker, started together with honcho until Ctrl-C.

The deployments follow ``INSTALLED_CONTEXTS`` (config/settings.py) and each context's
declaration (``context.toml``): every deployment runs a web server, a relay, its consumers if
it has any, and the processes its contexts declare. For a context ``name``:
``<NAME>_DATABASE_URL`` (default ``sqlite:///var/split/<name>.sqlite3``) and ``<NAME>_PORT``
(default ``PORT`` + its place in the list) choose its database and port; ``BROKER_URL`` is
shared (default: one filesystem broker under ``var/split/``).

    python scripts/run_split.py [--port 8000] [--procfile-only]
"""

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[1]
SPLIT_VAR = BASE_DIR / "var" / "split"


def deployments(first_port: int, environ: dict[str, str]) -> list[dict]:
    """Each installed context's deployment: name, environment, port, the commands it runs."""
    sys.path.insert(0, str(BASE_DIR))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from kernel.contexts import installed

    result = []
    for place, declaration in enumerate(installed()):
        prefix = declaration.name.upper()
        port = int(environ.get(f"{prefix}_PORT") or first_port + place)
        url = environ.get(f"{prefix}_DATABASE_URL") or f"sqlite:///{SPLIT_VAR / declaration.name}.sqlite3"
        processes = {
            "web": f"runserver 127.0.0.1:{port} --noreload",
            "relay": "run_outbox_relay",
            **({"consumers": "run_consumers"} if declaration.runs_consumer else {}),
            **declaration.processes,
        }
        env = {"CONTEXTS": declaration.name, "DATABASE_URL": url}
        result.append(
            {"name": declaration.name, "port": port, "env": env, "processes": processes, "api": declaration.urls}
        )
    return result


def procfile(split: list[dict]) -> str:
    lines = ["# Written by scripts/run_split.py (make run-split) from INSTALLED_CONTEXTS and each context.toml."]
    for deployment in split:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in deployment["env"].items())
        for process, args in deployment["processes"].items():
            lines.append(f"{deployment['name']}-{process}: {env} exec python manage.py {args}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT") or 8000), help="the first deployment's")
    parser.add_argument("--procfile-only", action="store_true", help="print the Procfile, prepare and start nothing")
    args = parser.parse_args()
    # Every deployment gets its CONTEXTS from here; the settings read while planning need DEBUG.
    os.environ.pop("CONTEXTS", None)
    os.environ.setdefault("DEBUG", "1")
    os.environ.setdefault("VAR_DIR", str(SPLIT_VAR))
    environ = dict(os.environ)
    split = deployments(args.port, environ)
    text = procfile(split)
    if args.procfile_only:
        sys.stdout.write(text)
        return 0

    SPLIT_VAR.mkdir(parents=True, exist_ok=True)
    for deployment in split:
        subprocess.run(
            [sys.executable, "manage.py", "prepare_deployment"],
            cwd=BASE_DIR,
            env={**environ, **deployment["env"]},
            check=True,
        )
    path = SPLIT_VAR / "Procfile"
    path.write_text(text)
    print()
    for deployment in split:
        what = "the API, its docs, its admin" if deployment["api"] else "its admin, /metrics, /readyz"
        page = "api/products/" if deployment["api"] else "admin/"
        print(f"  {deployment['name']:10} ({what}): http://127.0.0.1:{deployment['port']}/{page}")
    first = split[0]
    print("  Each deployment has its own admin users, e.g. for", first["name"] + ":")
    print(
        f"      DEBUG=1 CONTEXTS={first['name']} DATABASE_URL={first['env']['DATABASE_URL']} "
        ".venv/bin/python manage.py createsuperuser"
    )
    print(f"  The processes: {path.relative_to(BASE_DIR)}\n")
    # honcho answers Ctrl-C with 130 even when every process stopped cleanly (each exits 0).
    code = subprocess.run(
        ["honcho", "start", "-f", str(path), "-d", str(BASE_DIR)], cwd=BASE_DIR, env=environ
    ).returncode
    return 0 if code == 130 else code


if __name__ == "__main__":
    sys.exit(main())
