"""The broker's instruments: questions by outcome and source, time to decide, questions pending.

Made from a meter once, when telemetry is turned on (:func:`~broker.telemetry.enable`); the
names and units are those of ``design/telemetry.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram, Meter, UpDownCounter

__all__ = [
    "DURATION",
    "DURATION_BUCKETS",
    "PENDING",
    "QUESTIONS",
    "Instruments",
    "make_instruments",
]

#: Questions decided, by outcome, source and tool (a counter).
QUESTIONS = "broker.approval.questions"
#: Seconds from the question to its decision, by outcome and source (a histogram).
DURATION = "broker.approval.duration"
#: Questions asked and not yet decided (an up-down counter).
PENDING = "broker.approval.pending"

#: The histogram's bucket boundaries, in seconds: a rule decides in microseconds, a person in
#: seconds to minutes, a deadline ends the wait after a few minutes. (The SDK's default
#: boundaries, 0 to 10 000, are meant for milliseconds.)
DURATION_BUCKETS: tuple[float, ...] = (
    0.0001,
    0.001,
    0.01,
    0.1,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
)


@attrs.frozen
class Instruments:
    """The three instruments every observed question records into."""

    questions: Counter
    duration: Histogram
    pending: UpDownCounter


def make_instruments(meter: Meter) -> Instruments:
    """The broker's instruments, made from *meter*."""
    return Instruments(
        questions=meter.create_counter(
            QUESTIONS, unit="{question}", description="approval questions decided"
        ),
        duration=meter.create_histogram(
            DURATION,
            unit="s",
            description="time from an approval question to its decision",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        ),
        pending=meter.create_up_down_counter(
            PENDING, unit="{question}", description="approval questions not yet decided"
        ),
    )
