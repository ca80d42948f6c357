"""The table printed at the end of a run: each figure, its ceiling, the ratio and the target."""


def _fmt(value, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and value != value:  # NaN
        return "n/a"
    if isinstance(value, float) and abs(value) < 10:
        return f"{value:.2f}{unit}"
    return f"{value:,.0f}{unit}"


def _row(name: str, value: str, ceiling: str = "-", ratio=None, target: str = "-", met: bool | None = None):
    verdict = "-" if met is None else ("met" if met else "MISSED")
    return [name, value, ceiling, _fmt(ratio) if ratio is not None else "-", target, verdict]


def _pair(a: float, b: float, unit: str) -> str:
    return f"{_fmt(a)} / {_fmt(b)}{unit}"


def rows(f: dict) -> list[list[str]]:
    out = []
    if c := f.get("1_ceilings"):
        out.append(_row("1 kombu publish loop, persistent, no confirms", _fmt(c["kombu_publish_per_s"], "/s")))
        out.append(_row("1 SQL claim-and-mark loop, 500/batch", _fmt(c["sql_claim_rows_per_s"], "/s")))
        if "frames_publish_per_s" in c:
            out.append(_row("1 (stricter) py-amqp batched frames, no confirms", _fmt(c["frames_publish_per_s"], "/s")))
    if r := f.get("2_relay_throughput"):
        low = _fmt(r["lower_ceiling_per_s"], "/s")
        target = r.get("target_ratio1", 0.6)
        out.append(
            _row(
                "2 relay x1 (its pipelines), 50k rows, confirms",
                _fmt(r["relay1_per_s"], "/s"),
                low,
                r["ratio1"],
                f">= {target}",
                r["ratio1"] >= target,
            )
        )
        if "relay1_single_pipeline_per_s" in r:
            single = _fmt(r["relay1_single_pipeline_per_s"], "/s")
            out.append(_row("2 relay x1, one pipeline", single, low, r["ratio1_single_pipeline"]))
        out.append(_row("2 relay x2, 50k rows, confirms", _fmt(r["relay2_per_s"], "/s"), low, r["ratio2"]))
        if "ratio1_frames" in r:
            frames = _fmt(f["1_ceilings"]["frames_publish_per_s"], "/s")
            out.append(
                _row("2 relay x1 vs the stricter ceiling", _fmt(r["relay1_per_s"], "/s"), frames, r["ratio1_frames"])
            )
    if lat := f.get("3_latency"):
        p50, p99 = lat["p50_ms"], lat["p99_ms"]
        out.append(_row("3 commit -> queue p50 at 50/s", _fmt(p50, " ms"), target="< 10 ms", met=p50 < 10))
        out.append(_row("3 commit -> queue p99 at 50/s", _fmt(p99, " ms"), target="< 50 ms", met=p99 < 50))
        out.append(_row("3 same, polling only (no NOTIFY), p50", _fmt(lat["polling_only_p50_ms"], " ms")))
        n = lat["notify_cost"]
        name = f"3 single-row commits, {n['writers']} writers, with NOTIFY"
        without = _fmt(n["without_notify_per_s"], "/s") + " without"
        out.append(_row(name, _fmt(n["with_notify_per_s"], "/s"), without, n["ratio"]))
    if g := f.get("4_growth"):
        empty = _fmt(g["relay1_empty_per_s"], "/s") + " empty"
        value = _fmt(g["relay1_with_published_per_s"], "/s")
        out.append(_row("4 relay x1 beside 1M published rows", value, empty, g["ratio"], ">= 0.9", g["ratio"] >= 0.9))
        small, large = (f"{v:.0f} MB" for v in g["peak_rss_mb"].values())
        ok = g["rss_ratio"] <= 1.2
        out.append(_row("4 relay peak RSS, 200k vs 10k rows", large, small, g["rss_ratio"], "<= 1.2", ok))
    if c := f.get("5_consumer"):
        ceiling = f"{_fmt(c['consume_ack_per_s'])} ack / {_fmt(c['sql_per_s'])} sql"
        value = _fmt(c["consumer_per_s"], "/s")
        target = c.get("target_ratio", 0.5)
        name = "5 one consumer (batches): inbox + handler + outbox"
        out.append(_row(name, value, ceiling, c["ratio"], f">= {target}", c["ratio"] >= target))
    if e := f.get("6_end_to_end"):
        if "accepted_per_s" in e:
            commits = _fmt(e["single_row_commits_per_s"], "/s") + " commits"
            out.append(_row("6 checkouts accepted (backlog, 8 clients)", _fmt(e["accepted_per_s"], "/s")))
            value = _fmt(e["terminal_per_s"], "/s")
            out.append(
                _row("6 backlog drained to terminal, Procfile processes", value, "-", None, ">= 150/s",
                     e["terminal_per_s"] >= 150)
            )  # fmt: skip
            ratio = e["ratio_to_commits"]
            out.append(_row("6 the same vs single-row commits/s", value, commits, ratio, ">= 0.03", ratio >= 0.03))
        if p := e.get("paced"):
            value = _pair(p["confirmed_p50_ms"], p["confirmed_p99_ms"], " ms")
            ok = p["confirmed_p50_ms"] <= 50 and p["confirmed_p99_ms"] <= 150
            name = f"6 checkout -> CONFIRMED p50 / p99, paced {p['rate']:.0f}/s"
            out.append(_row(name, value, "-", None, "<= 50 / 150 ms", ok))
    if w := f.get("7_web"):
        value, bare = _fmt(w["checkout_per_s"], "/s"), _fmt(w["bare_per_s"], "/s")
        ok = w["ratio"] >= 0.5
        out.append(_row("7 checkout vs bare DRF insert (gunicorn)", value, bare, w["ratio"], ">= 0.5", ok))
    if t := f.get("8_tracing"):
        for part, name in (("relay", f"8 relay x1, {t['relay_rows'] // 1000}k rows"), ("consumer", "8 consumer")):
            out.append(
                _row(
                    f"{name}, tracing on (OTLP) / off",
                    _pair(t[f"{part}_on_per_s"], t[f"{part}_off_per_s"], "/s"),
                    ratio=t[f"{part}_on_off_ratio"],
                )
            )
    if c := f.get("9_cluster"):
        for part, name in (("relay", f"9 relay x1, {c['rows'] // 1000}k rows"), ("saga", "9 backlog drained")):
            value = _pair(c[f"{part}_cluster_per_s"], c[f"{part}_single_per_s"], "/s")
            out.append(_row(f"{name}, three-node cluster / one node", value, ratio=c[f"{part}_ratio"]))
    if g := f.get("10_gateway_pace"):
        if p := g.get("previous"):
            name = f"10 backlog of {g['backlog']} drained, gateway 0 ms, the release before (calls inline)"
            out.append(_row(name, _fmt(p["terminal_per_s_by_latency_ms"][0], "/s")))
        if w := g.get("worker"):
            rates, ratios = w["terminal_per_s_by_latency_ms"], w["ratio_to_0ms"]
            for ms, rate in rates.items():
                name = f"10 backlog of {g['backlog']} drained, gateway {ms} ms, gateway worker"
                if int(ms) == 250:
                    ok = rate >= 150 and ratios.get(ms, 0) >= 0.6
                    out.append(_row(name, _fmt(rate, "/s"), "0 ms", ratios.get(ms), ">= 150/s, >= 0.6", ok))
                elif int(ms) == 0 and "worker_0ms_to_previous_0ms" in g:
                    ratio = g["worker_0ms_to_previous_0ms"]
                    out.append(_row(name, _fmt(rate, "/s"), "release before", ratio, ">= 1.0", ratio >= 1.0))
                else:
                    out.append(_row(name, _fmt(rate, "/s"), "0 ms", ratios.get(ms)))
    if c := f.get("11_pg_cluster"):
        value = _pair(c["saga_cluster_per_s"], c["saga_single_per_s"], "/s")
        out.append(_row("11 backlog drained, sync PostgreSQL cluster / one server", value, ratio=c["saga_ratio"]))
    if k := f.get("13_package"):
        for part, name in (("relay", "13 relay x1"), ("consumer", "13 consumer")):
            value = _pair(k[f"{part}_package_per_s"], k[f"{part}_previous_per_s"], "/s")
            ratio, spread = k[f"{part}_ratio"], k[f"{part}_previous_spread"]
            target = f">= {1 - spread:.2f} (noise)"
            out.append(
                _row(
                    f"{name}, the package / the release before",
                    value,
                    "release before",
                    ratio,
                    target,
                    ratio >= 1 - spread,
                )
            )
    if s := f.get("12_saga_styles"):
        o, c = s["orchestration"], s["choreography"]
        for key, name, unit in (
            ("drained_per_s", f"backlog of {s['backlog']:,} drained, first publish to last decided", "/s"),
            ("confirmed_p50_ms", f"checkout -> CONFIRMED p50, paced {s['paced_rate']:.0f}/s", " ms"),
            ("confirmed_p99_ms", f"checkout -> CONFIRMED p99, paced {s['paced_rate']:.0f}/s", " ms"),
            ("outbox_per_order", "outbox rows per order", ""),
            ("deliveries_per_order", "deliveries (inbox rows) per order", ""),
        ):
            value = f"{o[key]:.2f} / {c[key]:.2f}" if key.endswith("_per_order") else _pair(o[key], c[key], unit)
            out.append(_row(f"12 {name}, orchestration / choreography", value, ratio=s["ratio"][key]))
    if e := f.get("14_encryption"):
        clear, target = e["clear"], e["target_sealed_to_clear"]
        for key, what in (
            ("accepted_per_s", "checkouts accepted"),
            ("drained_per_s", f"backlog of {e['backlog']:,} drained"),
        ):
            for name, version in (("token", "token encrypted (v3)"), ("sealed", "token and customer sealed (v4)")):
                value = _pair(e[name][key], clear[key], "/s")
                ratio = e["ratio"][f"{name}_to_clear"][key]
                row = f"14 {what}, {version} / clear (v2)"
                if name == "sealed" and key == "drained_per_s":  # issue 46's target
                    out.append(_row(row, value, "clear", ratio, f">= {target}", ratio >= target))
                else:
                    out.append(_row(row, value, "clear", ratio))
    return out


def table(figures: dict) -> str:
    header = ["figure", "value", "ceiling", "ratio", "target", ""]
    body = rows(figures)
    widths = [max(len(str(r[i])) for r in [header, *body]) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    fmt = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True))  # noqa: E731
    return "\n".join(["", fmt(header), line, *(fmt(r) for r in body), ""])
