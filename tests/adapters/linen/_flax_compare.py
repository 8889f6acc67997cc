"""Run the same Linen code on ``flax.linen`` and ``adapters.linen`` and compare.

``check(build, *args)`` builds the module with each library's namespace (``build(nn)``),
initialises both with the same key, checks the variable trees agree (paths, shapes,
dtypes and, since both derive init keys the same way, values), then applies ours to
Flax's variables and checks the outputs agree. Flax runs under standard promotion.
"""

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import adapters.linen as ours

TOL = 1e-5


def flax_linen() -> Any:
    return pytest.importorskip("flax.linen")


@contextlib.contextmanager
def standard() -> Iterator[None]:
    with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        yield


def plain(tree: Any) -> Any:
    """Variables as nested plain dicts (FrozenDicts and boxes kept as leaves' values)."""
    if hasattr(tree, "items"):
        return {k: plain(v) for k, v in tree.items()}
    return tree


def _dtype(x: Any) -> Any:
    return x.dtype if hasattr(x, "dtype") else jnp.asarray(x).dtype


def assert_same_tree(a: Any, b: Any, tol: float = TOL, values: bool = True) -> None:
    fa = jax.tree_util.tree_flatten_with_path(plain(a))[0]
    fb = jax.tree_util.tree_flatten_with_path(plain(b))[0]
    pa = [jax.tree_util.keystr(p) for p, _ in fa]
    pb = [jax.tree_util.keystr(p) for p, _ in fb]
    assert pa == pb
    for path, (_, x), (_, y) in zip(pa, fa, fb):
        assert jnp.shape(x) == jnp.shape(y), path
        assert _dtype(x) == _dtype(y), path
        if values:
            np.testing.assert_allclose(
                np.asarray(x, np.float64 if jnp.isrealobj(x) else np.complex128),
                np.asarray(y, np.float64 if jnp.isrealobj(y) else np.complex128),
                rtol=tol,
                atol=tol,
                err_msg=path,
            )


def check(
    build: Callable[[Any], Any],
    *args: Any,
    rngs: Any = None,
    mutable: Any = False,
    method: str | None = None,
    tol: float = TOL,
    init_values: bool = True,
    **kwargs: Any,
) -> tuple[Any, Any]:
    """Compare ``build(nn)`` across both libraries; return (ours output, flax variables)."""
    theirs_nn = flax_linen()
    key = jax.random.key(0)
    init_rngs = key if rngs is None else {"params": key, **rngs}
    with standard():
        theirs = build(theirs_nn)
        ref_vars = theirs.init(init_rngs, *args, method=method, **kwargs)
        ref_out = theirs.apply(ref_vars, *args, rngs=rngs, mutable=mutable, method=method, **kwargs)
        mine = build(ours)
        our_vars = mine.init(init_rngs, *args, method=method, **kwargs)
        assert_same_tree(our_vars, ref_vars, tol, values=init_values)
        out = mine.apply(ref_vars, *args, rngs=rngs, mutable=mutable, method=method, **kwargs)
    assert_same_tree(out, ref_out, tol)
    return out, ref_vars
