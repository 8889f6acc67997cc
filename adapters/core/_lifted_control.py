"""Lifted control flow: ``while_loop``, ``cond``, ``switch`` (``pack`` plus
``pytreemod.while_loop``/``cond``/``switch``).

Limits (docs/design/lifting.md): carry variables cannot be created in a ``while_loop``
body (``CarryVariableInitError``); ``cond``/``switch`` branches must create and update the
same variables (``BranchVariableMismatchError``).
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import jax
import jax.numpy as jnp

import pytreemod as pm

from ._errors import BranchVariableMismatchError
from ._lift import pack
from ._lift_util import (
    NO_AXES,
    as_arrays,
    is_scope,
    key_paths,
    merge_carry,
    scope_paths,
    unzip2,
)
from ._scope import Scope

C = TypeVar("C")

# ----------------------------------------------------------------------------- while_loop


def while_loop(
    cond_fn: Callable[[Scope, C], Any],
    body_fn: Callable[[Scope, C], C],
    scope: Scope,
    init: C,
    carry_variables: Any = False,
    broadcast_variables: Any = True,
    split_rngs: Mapping[Any, bool] = NO_AXES,
) -> C:
    """A lifted ``jax.lax.while_loop`` (``pack`` plus ``pytreemod.while_loop``).

    ``cond_fn(scope, carry)`` sees every lifted collection read-only; ``body_fn(scope,
    carry) -> carry`` may update ``carry_variables``, which must exist before the loop
    (``CarryVariableInitError`` otherwise). ``broadcast_variables`` are read-only. Split
    streams get the iteration number folded in.
    """
    rng_filters, rng_splits = unzip2(split_rngs.items())

    def inner(
        scope_fn: Callable[..., Any],
        repack_fn: Callable[..., Any],
        variable_groups: Any,
        rng_groups: Any,
    ) -> Any:
        carry_vars, bcast_vars = variable_groups
        probe = scope_fn(variable_groups, rng_groups)
        where = scope_paths(probe)
        for s in jax.tree.leaves(probe, is_leaf=is_scope):
            if isinstance(s, Scope):
                s.invalidate()

        def loop_rngs(i: Any) -> tuple[Any, ...]:
            return tuple(
                jax.tree.map(lambda k: jax.random.fold_in(k, i), g) if split else g
                for g, split in zip(rng_groups, rng_splits)
            )

        def cond_wrapper(state: Any) -> Any:
            i, cv, c = state
            s = scope_fn((cv, bcast_vars), loop_rngs(-i), mutable_filter=False)
            return cond_fn(s, c)

        def body_wrapper(state: Any) -> Any:
            i, cv, c = state
            s = scope_fn((cv, bcast_vars), loop_rngs(i))
            c = body_fn(s, c)
            (out,) = repack_fn(s)
            return i + 1, merge_carry("while_loop", where, cv, out), c

        start = (jnp.asarray(0, jnp.int32), as_arrays(carry_vars), as_arrays(init))
        _, carry_vars, c = pm.while_loop(cond_wrapper, body_wrapper, start)
        return c, (carry_vars,)

    return pack(
        inner,
        (carry_variables, broadcast_variables),
        (carry_variables,),
        rng_filters,
        name="while_loop",
    )(scope)


# ----------------------------------------------------------------------------- cond/switch


def _branching(
    kind: str,
    branches: Sequence[Callable[..., Any]],
    run: Callable[..., Any],
    scope: Any,
    operands: tuple[Any, ...],
    variables: Any,
    rngs: Any,
) -> Any:
    def inner(
        scope_fn: Callable[..., Any],
        repack_fn: Callable[..., Any],
        variable_groups: Any,
        rng_groups: Any,
    ) -> Any:
        seen: list[tuple[int, Any, set[str]]] = []

        def make(i: int, branch: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(variable_groups: Any, rng_groups: Any, *ops: Any) -> Any:
                s = scope_fn(variable_groups, rng_groups)
                where = scope_paths(s)
                y = branch(s, *ops)
                out = repack_fn(s)
                structure = jax.tree.structure(out, is_leaf=pm.is_box)
                if seen and structure != seen[0][1]:
                    j, _, first = seen[0]
                    mine = key_paths(out)
                    only_i = sorted(mine - first) or ["(none)"]
                    only_j = sorted(first - mine) or ["(none)"]
                    raise BranchVariableMismatchError(
                        f"lift.{kind} at {where}: branch {i} and branch {j} create or update "
                        f"different variables (only in branch {i}: {', '.join(only_i)}; only "
                        f"in branch {j}: {', '.join(only_j)}). Every branch must create and "
                        "update the same variables; run all branches once at init first."
                    )
                seen.append((i, structure, key_paths(out)))
                return y, out

            return wrapper

        fns = [make(i, b) for i, b in enumerate(branches)]
        return run(fns, tuple(variable_groups), tuple(rng_groups), *operands)

    return pack(inner, (variables,), (variables,), (rngs,), name=kind)(scope)


def cond(
    pred: Any,
    true_fun: Callable[..., C],
    false_fun: Callable[..., C],
    scope: Any,
    *operands: Any,
    variables: Any = True,
    rngs: Any = True,
) -> C:
    """A lifted ``jax.lax.cond`` (``pack`` plus ``pytreemod.cond``).

    Both branches get a scope with the lifted ``variables`` and ``rngs``; they must
    return the same structure and create/update the same variables
    (``BranchVariableMismatchError`` otherwise).
    """
    run = lambda fns, *ops: pm.cond(pred, fns[0], fns[1], *ops)
    return _branching("cond", [true_fun, false_fun], run, scope, operands, variables, rngs)


def switch(
    index: Any,
    branches: Sequence[Callable[..., C]],
    scope: Any,
    *operands: Any,
    variables: Any = True,
    rngs: Any = True,
) -> C:
    """A lifted ``jax.lax.switch`` (``pack`` plus ``pytreemod.switch``); see ``cond``."""
    run = lambda fns, *ops: pm.switch(index, fns, *ops)
    return _branching("switch", list(branches), run, scope, operands, variables, rngs)
