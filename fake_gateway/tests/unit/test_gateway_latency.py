"""The fake gateway's latency model: a lognormal around FAKE_GATEWAY_LATENCY, p99 about 6x the median."""

import random
import statistics

from django.test import override_settings

from fake_gateway import server as gateway_server


def samples(median_ms: float, count: int) -> list[float]:
    random.seed(27)
    with override_settings(FAKE_GATEWAY_LATENCY=median_ms):
        return sorted(gateway_server.latency() for _ in range(count))


def test_the_median_is_the_setting_and_the_tail_about_six_times_it():
    answers = samples(250, 20_000)
    median, p99 = statistics.median(answers), answers[int(len(answers) * 0.99)]
    assert 0.24 < median < 0.26
    assert 5.0 < p99 / median < 7.0


def test_zero_latency_answers_at_once():
    assert set(samples(0, 100)) == {0.0}
