"""Benchmark of the wire format and typed binding: what a task costs to send and run.

Measures, in one run, a 3-argument function ``remind(user_id: int, text: str, when:
datetime)``:

* ``direct``: a plain Python call, ``remind(*values)``;
* ``msgpack``: plain ``msgpack.packb`` + ``msgpack.unpackb`` of the same
  ``[name, args, kwargs]`` (with msgpack's own datetime support), no checks, no call;
* ``htask``: ``registry.call(encode_call(name, args, kwargs))``: encode, decode, look
  the name up, bind (convert to the declared types) and call;

and the parts of ``htask`` alone (encode, decode, bind), then the same with keyword
arguments. The target (issue 4): ``htask`` costs at most 2x the plain msgpack round
trip. It also checks that binding never inspects the signature again: building the
binder is timed once, and ``inspect.signature`` is counted during the timed calls.

Every case runs in short interleaved rounds and the best round counts, so a busy
machine slows all cases alike instead of whichever ran during the noise.

    python bench/binding.py            # 60 rounds of 5,000 calls per case
    python bench/binding.py --quick    # 15 rounds of 2,000 calls
"""

from __future__ import annotations

import argparse
import gc
import inspect
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import msgpack

from django_htask.engine import Registry, decode_call, encode_call
from django_htask.engine.binding import Binder

NAME = "bench.binding:remind"
WHEN = datetime(2026, 3, 14, 9, 30, 15, 250_000, tzinfo=UTC)
ARGS: list[Any] = [42, "water the plants", WHEN]
KWARGS: dict[str, Any] = {"user_id": 42, "text": "water the plants", "when": WHEN}


def remind(user_id: int, text: str, when: datetime) -> int:
    """The task: three arguments of three types, one of them an ext type."""
    return user_id


def measure(cases: dict[str, Callable[[], object]], rounds: int, calls: int) -> dict[str, float]:
    """Best time per call (ns) of each case over interleaved rounds."""
    best = dict.fromkeys(cases, float("inf"))
    loop = range(calls)
    gc.collect()
    gc.disable()
    try:
        for _ in range(rounds):
            for label, case in cases.items():
                start = time.perf_counter_ns()
                for _ in loop:
                    case()
                best[label] = min(best[label], (time.perf_counter_ns() - start) / calls)
    finally:
        gc.enable()
    return best


class SignatureCounter:
    """Counts calls of ``inspect.signature`` while installed (a context manager)."""

    def __init__(self) -> None:
        self.calls = 0
        self._original = inspect.signature

    def __enter__(self) -> SignatureCounter:
        original = self._original

        def counting(*args: Any, **kwargs: Any) -> inspect.Signature:
            self.calls += 1
            return original(*args, **kwargs)

        inspect.signature = counting
        return self

    def __exit__(self, *exc: object) -> None:
        inspect.signature = self._original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    options = parser.parse_args()
    rounds, calls = (15, 2_000) if options.quick else (60, 5_000)

    registry = Registry()
    registry.register(remind, name=NAME)
    packb, unpackb = msgpack.packb, msgpack.unpackb
    payload = encode_call(NAME, ARGS, {})
    kw_payload = encode_call(NAME, [], KWARGS)
    assert registry.call(payload) == registry.call(kw_payload) == remind(*ARGS)
    plain = unpackb(packb([NAME, ARGS, {}], datetime=True), timestamp=3)
    assert plain == [NAME, ARGS, {}]
    assert decode_call(payload) == (NAME, ARGS, {})

    start = time.perf_counter_ns()
    for _ in range(100):
        Binder(remind, NAME)
    build_ns = (time.perf_counter_ns() - start) / 100

    cases: dict[str, Callable[[], object]] = {
        "direct": lambda: remind(*ARGS),
        "msgpack": lambda: unpackb(packb([NAME, ARGS, {}], datetime=True), timestamp=3),
        "htask": lambda: registry.call(encode_call(NAME, ARGS, {})),
        "  encode_call": lambda: encode_call(NAME, ARGS, {}),
        "  decode_call": lambda: decode_call(payload),
        "  registry.bind": lambda: registry.bind(NAME, ARGS, {}),
        "kw direct": lambda: remind(**KWARGS),
        "kw msgpack": lambda: unpackb(packb([NAME, [], KWARGS], datetime=True), timestamp=3),
        "kw htask": lambda: registry.call(encode_call(NAME, [], KWARGS)),
    }
    with SignatureCounter() as counter:
        best = measure(cases, rounds, calls)

    print(f"binding bench: {rounds} rounds x {calls:,} calls per case, best round")
    print(f"python {sys.version.split()[0]}, msgpack {'.'.join(map(str, msgpack.version))}")
    print(f"payload: {len(payload)} bytes positional, {len(kw_payload)} bytes keyword")
    print()
    width = max(map(len, cases))
    for label, ns in best.items():
        print(f"{label:<{width}}  {ns:8.0f} ns/call")
    print()
    for prefix in ("", "kw "):
        total = best[f"{prefix}htask"]
        plain_ns = best[f"{prefix}msgpack"]
        added = total - best[f"{prefix}direct"]
        verdict = "OK" if total <= 2 * plain_ns else "OVER TARGET"
        print(
            f"{prefix or 'positional '}htask / msgpack round trip: {total / plain_ns:.2f}x "
            f"(target <= 2x: {verdict}); added over a direct call: {added:.0f} ns"
        )
    print(
        f"binder built once: {build_ns / 1000:.1f} us "
        f"(= {build_ns / best['  registry.bind']:.0f} binds); "
        f"inspect.signature calls during {len(cases) * rounds * calls:,} timed calls: "
        f"{counter.calls}"
    )


if __name__ == "__main__":
    main()
