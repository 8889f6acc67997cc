"""``flax.nnx.tracers``: which JAX trace an NNX object was created in.

A Variable remembers the trace it was built under; mutating it from another trace (a
Variable created outside ``jax.jit`` updated from inside the traced function) would leak a
tracer, so NNX refuses it. ``TraceState`` is that memory.
"""

from typing import Any

import jax
import jax.extend

__all__ = ["TraceState", "current_jax_trace"]


def current_jax_trace() -> Any:
    """An opaque token of the JAX trace active now (equal tokens: the same trace)."""
    return jax.extend.core.get_opaque_trace_state(convention="nnx")


class TraceState:
    """The JAX trace active when this object was created."""

    __slots__ = ("_jax_trace",)

    def __init__(self) -> None:
        self._jax_trace = current_jax_trace()

    @property
    def jax_trace(self) -> Any:
        """The opaque trace token."""
        return self._jax_trace

    def is_valid(self) -> bool:
        """Whether the trace active now is the one this object was created in."""
        return self._jax_trace == current_jax_trace()

    def __repr__(self) -> str:
        # The layout of nnx's reprlib (a sibling layer, so not imported here).
        return f"{type(self).__name__}(\n  jax_trace={self._jax_trace!r}\n)"

    def __treescope_repr__(self, path: Any, subtree_renderer: Any) -> Any:
        import treescope  # optional: only needed to render

        return treescope.repr_lib.render_object_constructor(
            object_type=type(self),
            attributes={"jax_trace": self._jax_trace},
            path=path,
            subtree_renderer=subtree_renderer,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TraceState) and self._jax_trace == other._jax_trace

    __hash__ = None  # type: ignore[assignment]

    # Unpickled in a new process: the trace there is the one active at load time.
    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._jax_trace = current_jax_trace()


# A TraceState has no leaves: rebuilding one after a transform records the trace there.
jax.tree_util.register_pytree_node(
    TraceState, lambda _: ((), None), lambda _aux, _children: TraceState()
)
