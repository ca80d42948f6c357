"""Figure 13: the bus installed as a package (issue 31) against the release before it, same run.

Each round measures, for this tree and for the release before (its tree from git, run with this
virtual environment: its own ``messaging`` folder, not the package), one relay draining the
outbox (figure 2's drain) and one consumer process through its preloaded queue (figure 5's), the
two trees alternating which goes first. The package must cost nothing: each ratio (this tree over
the release before) within the rounds' own spread.
"""

import tempfile
from pathlib import Path

from bench import bus
from bench.app_figures import consumer_rate
from bench.common import BASE_DIR, Bench, median, progress, release_tree
from bench.relay_figures import DRAIN_ROWS

# The last commit before the bus became packages/django-reliable-messaging.
PREVIOUS_RELEASE = "5d9bdcb"


def package_cost(bench: Bench) -> None:
    rounds = []
    with tempfile.TemporaryDirectory(prefix="bench-release-") as root:
        previous = release_tree(Path(root), PREVIOUS_RELEASE)
        trees = {"package": BASE_DIR, "previous": previous}
        for n in range(1, bench.rounds + 1):
            order = ["package", "previous"] if n % 2 else ["previous", "package"]
            measured = {}
            for name in order:
                cwd = trees[name]
                bus.purge()
                relay = bench.drain(DRAIN_ROWS, 1, cwd=cwd)
                bus.purge()
                consumer = consumer_rate(bench, cwd=cwd)
                measured[name] = {"relay": relay, "consumer": consumer}
            rounds.append(measured)
            p, q = measured["package"], measured["previous"]
            progress(
                f"13 package round {n}/{bench.rounds}: relay {p['relay']:,.0f}/s (release before {q['relay']:,.0f}/s), "
                f"consumer {p['consumer']:,.0f}/s (release before {q['consumer']:,.0f}/s)"
            )
    bus.purge()
    bench.db.reset_outbox()
    figure = {"previous_release": PREVIOUS_RELEASE, "rounds": rounds}
    for part in ("relay", "consumer"):
        ours = [r["package"][part] for r in rounds]
        theirs = [r["previous"][part] for r in rounds]
        figure[f"{part}_package_per_s"] = median(ours)
        figure[f"{part}_previous_per_s"] = median(theirs)
        figure[f"{part}_ratio"] = median([a / b for a, b in zip(ours, theirs, strict=True)])
        # The rounds' own spread: how far one round of the release before strays from its median.
        figure[f"{part}_previous_spread"] = (max(theirs) - min(theirs)) / median(theirs)
    bench.figures["13_package"] = figure
