"""Timing helpers: interleaved rounds, minimum over rounds, so background load hits every
contestant alike and the ratios stay meaningful on a shared machine."""

import platform
import time
from collections.abc import Callable

import jax


def per_call_us(
    fns: dict[str, Callable[[], object]], *, calls: int, rounds: int
) -> dict[str, float]:
    """Microseconds per call of each function: min over ``rounds`` interleaved rounds."""
    for fn in fns.values():  # compile and warm up
        for _ in range(max(10, calls // 10)):
            fn()
    jax.effects_barrier()
    best = {name: float("inf") for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            jax.effects_barrier()
            best[name] = min(best[name], (time.perf_counter() - start) / calls * 1e6)
    return best


def machine() -> str:
    """One line describing the machine and versions."""
    import equinox
    import flax

    return (
        f"{platform.processor() or platform.machine()}, {jax.device_count()} CPU device(s) "
        f"visible, Python {platform.python_version()}, jax {jax.__version__}, "
        f"equinox {equinox.__version__}, flax {flax.__version__}"
    )
