"""Randomness is pure: the same key gives a bit-identical model, in this process or another."""

import hashlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import pytreemod as pm

ROOT = Path(__file__).resolve().parents[2]


class Dense(pm.Module):
    weight: pm.Param
    bias: pm.Param

    def __init__(self, n_in: int, n_out: int, *, key: jax.Array):
        wkey, bkey = jax.random.split(key)
        init = pm.with_partitioning(jax.random.normal, ("embed", "mlp"))
        self.weight = pm.Param(init(wkey, (n_in, n_out), jnp.float32))
        self.bias = pm.Param(jax.random.uniform(bkey, (n_out,), jnp.float32, -0.1, 0.1))


class Net(pm.Module):
    layers: list[Dense]
    embed: pm.Param
    mean: pm.BatchStat
    width: int = pm.field(static=True, default=4)

    def __init__(self, *, key: jax.Array, width: int = 4):
        keys = jax.random.split(key, 3)
        self.layers = [Dense(width, width, key=k) for k in keys[:2]]
        self.embed = pm.Param(jax.random.normal(keys[2], (width, width), jnp.float32))
        self.mean = pm.BatchStat(jnp.zeros(width, jnp.float32))
        self.width = width


def _leaf_bytes(tree: object) -> list[bytes]:
    out = []
    for leaf in jax.tree.leaves(tree):
        arr = np.asarray(leaf)
        out.append(f"{arr.dtype}{arr.shape}".encode() + arr.tobytes())
    return out


def digest(seed: int) -> str:
    """SHA-256 over every leaf's dtype, shape and bytes of the model built from ``seed``."""
    h = hashlib.sha256()
    for b in _leaf_bytes(Net(key=jax.random.key(seed))):
        h.update(b)
    return h.hexdigest()


def test_same_key_bit_identical_models() -> None:
    a, b = Net(key=jax.random.key(7)), Net(key=jax.random.key(7))
    assert jax.tree.structure(a) == jax.tree.structure(b)
    assert _leaf_bytes(a) == _leaf_bytes(b)
    assert all(x is not y for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_same_key_bit_identical_ensembles(getkey: Callable[[], jax.Array]) -> None:
    key = getkey()
    e1 = pm.vmap(lambda k: Net(key=k))(jax.random.split(key, 3))
    e2 = pm.vmap(lambda k: Net(key=k))(jax.random.split(key, 3))
    assert _leaf_bytes(e1) == _leaf_bytes(e2)


def test_different_keys_different_models() -> None:
    a, b = Net(key=jax.random.key(0)), Net(key=jax.random.key(1))
    for path_leaf_a, leaf_b in zip(
        jax.tree_util.tree_leaves_with_path(pm.state(a, "params")),
        jax.tree.leaves(pm.state(b, "params")),
    ):
        path, leaf_a = path_leaf_a
        assert not np.array_equal(np.asarray(leaf_a), np.asarray(leaf_b)), path
    # Deterministic state (zeros) is the same, of course.
    np.testing.assert_array_equal(a.mean.value, b.mean.value)
    # Layers built from split keys differ from each other too.
    assert not np.array_equal(a.layers[0].weight.value.value, a.layers[1].weight.value.value)


def test_jit_construction_matches_eager() -> None:
    key = jax.random.key(3)
    eager = Net(key=key)
    jitted = pm.jit(lambda k: Net(key=k))(key)
    assert jax.tree.structure(eager) == jax.tree.structure(jitted)
    for x, y in zip(jax.tree.leaves(eager), jax.tree.leaves(jitted)):
        assert x.dtype == y.dtype
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)


def test_same_key_same_model_across_processes() -> None:
    code = "from tests.pytreemod.test_randomness import digest; print(digest(11))"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr
        outs.append(stdout.strip().splitlines()[-1])
    assert len(outs[0]) == 64
    assert outs[0] == outs[1] == digest(11)
    assert digest(12) != outs[0]
