"""``python -m bench.path``: the module path of one question (issue 26 records it in
design/architecture.md, so the tool must keep measuring what it says)."""

from __future__ import annotations

import itertools

import trio

from bench.path import summarise, trace_one


def test_summarise_counts_modules_and_returns_to_a_module_left() -> None:
    assert summarise(["a", "b", "a", "c", "b"]) == (3, 2)
    assert summarise([]) == (0, 0)


def test_the_asking_task_goes_from_the_broker_through_the_algorithm_to_the_store() -> None:
    sequence = trio.run(trace_one, "memory", True)
    assert sequence[0] == "broker._broker"
    for module in ("broker._questions", "broker._appends", "broker.store._memory"):
        assert module in sequence
    # Collapsed: never the same module twice in a row.
    assert all(a != b for a, b in itertools.pairwise(sequence))


def test_the_whole_thread_adds_the_writer_actor_on_a_durable_store() -> None:
    task_only = trio.run(trace_one, "sqlite", True)
    whole = trio.run(trace_one, "sqlite", False)
    assert "broker.store._pipeline" not in task_only
    assert "broker.store._pipeline" in whole
