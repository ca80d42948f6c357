"""Figure 8: what OpenTelemetry costs the relay and a consumer, off against on, in the same run.

"Off" is no OTEL_* variable (no tracer provider, the default); "on" exports every span over
OTLP/HTTP to a local endpoint the bench runs (``bench.otlp_sink``), with the SDK's default
batching. The order alternates between rounds so that drift does not favour one side.
"""

from bench import bus
from bench.app_figures import consumer_rate
from bench.common import Bench, median, progress
from bench.otlp_sink import OtlpSink

RELAY_ROWS = 20_000
OFF = {"OTEL_TRACES_EXPORTER": "none"}


def tracing(bench: Bench) -> None:
    sink = OtlpSink()
    on = {"OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint}
    rounds = []
    try:
        for n in range(1, bench.rounds + 1):
            measured: dict[str, dict[str, float]] = {"relay": {}, "consumer": {}}
            for name, env in (("off", OFF), ("on", on)) if n % 2 else (("on", on), ("off", OFF)):
                bus.purge()
                measured["relay"][name] = bench.drain(RELAY_ROWS, 1, env=env)
                bus.purge()
                measured["consumer"][name] = consumer_rate(bench, env)
            rounds.append(measured)
            progress(
                f"8 tracing round {n}/{bench.rounds}: relay {measured['relay']['off']:,.0f}/s off, "
                f"{measured['relay']['on']:,.0f}/s on; consumer {measured['consumer']['off']:,.0f}/s off, "
                f"{measured['consumer']['on']:,.0f}/s on ({sink.exports} exports so far)"
            )
    finally:
        sink.close()
        bus.purge()
        bench.db.reset_outbox()
    if not sink.exports:
        raise RuntimeError("tracing was on but nothing reached the OTLP endpoint")
    figure = {"relay_rows": RELAY_ROWS, "exports": sink.exports, "exported_bytes": sink.bytes, "rounds": rounds}
    for part in ("relay", "consumer"):
        figure[f"{part}_off_per_s"] = median([r[part]["off"] for r in rounds])
        figure[f"{part}_on_per_s"] = median([r[part]["on"] for r in rounds])
        figure[f"{part}_on_off_ratio"] = median([r[part]["on"] / r[part]["off"] for r in rounds])
    bench.figures["8_tracing"] = figure
