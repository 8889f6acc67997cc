"""``adapters.core.tracers``: the JAX trace state (``flax.core.tracers``' names)."""

from typing import Any


def current_trace() -> Any:
    """An opaque token for the current JAX trace (equal tokens: the same trace)."""
    # jax.extend imports all of its submodules (Pallas among them): loaded when needed.
    from jax.extend import core as jex_core

    return jex_core.get_opaque_trace_state(convention="flax")


def check_trace_level(base_level: Any) -> None:
    """Accepts any trace, as Flax's does at present (kept for code that calls it)."""
    del base_level


__all__ = ["check_trace_level", "current_trace"]
