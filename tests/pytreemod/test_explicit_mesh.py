"""Standard layouts written with pm.nn layers and logical names only, on Explicit and Auto
2x4 meshes: forward and an adam step equal the unsharded model, shardings are kept.

The user writes no ``out_sharding`` and no ``reshard``: the ops derive every output
sharding from the operands' types (see pytreemod/_sharding/_policy.py).
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

import pytreemod as pm
from pytreemod.nn import functional as F
from pytreemod.nn import initializers as init

D, H, HEADS, VOCAB, BATCH, LEN = 16, 32, 4, 24, 4, 6
LAYERS = {pm.PARTITION_NAME: "layers"}

TP = (("batch", "data"), ("mlp", "model"), ("heads", "model"), ("vocab", "model"))
FSDP = (("batch", "data"), ("embed", "data"))
FSDP_TP = (*TP, ("embed", "data"))
DP = (("batch", "data"),)


def lp(fn: Any, *names: str | None) -> Any:
    return pm.with_logical_partitioning(fn, names)


def kinit(*names: str | None) -> Any:
    return lp(init.lecun_normal(), *names)


def zeros(*names: str | None) -> Any:
    return lp(init.zeros, *names)


class TPMLP(pm.Module):
    """Column-parallel up projection, row-parallel down projection."""

    up: pm.nn.Linear
    down: pm.nn.Linear

    def __init__(self, *, key: jax.Array):
        k1, k2 = jax.random.split(key)
        self.up = pm.nn.Linear(
            D, H, kernel_init=kinit("embed", "mlp"), bias_init=zeros("mlp"), key=k1
        )
        self.down = pm.nn.Linear(
            H, D, kernel_init=kinit("mlp", "embed"), bias_init=zeros("embed"), key=k2
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down(jax.nn.gelu(self.up(x)))


class Block(pm.Module):
    """A pre-norm transformer block: heads over ``model``, the MLP column-then-row."""

    ln1: pm.nn.LayerNorm
    attn: pm.nn.MultiHeadAttention
    ln2: pm.nn.RMSNorm
    mlp: TPMLP

    def __init__(self, *, key: jax.Array):
        k1, k2, k3, k4 = jax.random.split(key, 4)
        self.ln1 = pm.nn.LayerNorm(
            D, scale_init=lp(init.ones, "embed"), bias_init=zeros("embed"), key=k1
        )
        self.attn = pm.nn.MultiHeadAttention(
            HEADS,
            D,
            kernel_init=kinit("embed", "heads", "kv"),
            out_kernel_init=kinit("heads", "kv", "embed"),
            # No biases: the key bias's gradient is zero up to rounding, which adam's
            # normalisation turns into different steps on different layouts.
            use_bias=False,
            key=k2,
        )
        self.ln2 = pm.nn.RMSNorm(D, scale_init=lp(init.ones, "embed"), key=k3)
        self.mlp = TPMLP(key=k4)

    def __call__(self, x: jax.Array) -> jax.Array:
        mask = F.make_causal_mask(jnp.ones(x.shape[:2]))
        x = x + self.attn(self.ln1(x), mask=mask, deterministic=True)
        return x + self.mlp(self.ln2(x))


class LM(pm.Module):
    """Vocabulary-sharded embedding, a pm.scan over a pm.vmap-built stack, tied logits."""

    embed: pm.nn.Embedding
    blocks: Block
    ln: pm.nn.LayerNorm

    def __init__(self, depth: int = 2, *, key: jax.Array):
        k1, k2 = jax.random.split(key)
        self.embed = pm.nn.Embedding(
            VOCAB, D, embedding_init=lp(init.normal(1.0), "vocab", "embed"), key=k1
        )
        make = pm.vmap(lambda k: Block(key=k), metadata_params=LAYERS)
        self.blocks = make(jax.random.split(k2, depth))
        self.ln = pm.nn.LayerNorm(D)

    def __call__(self, ids: jax.Array) -> jax.Array:
        @pm.scan(in_axes=(pm.Carry, 0), out_axes=pm.Carry, metadata_params=LAYERS)
        def body(x: jax.Array, block: Block) -> jax.Array:
            return block(x)

        x = body(self.embed(ids), self.blocks)
        return self.embed.attend(self.ln(x))


# ----------------------------------------------------------------------------- harness


def _mesh(kind: AxisType) -> Mesh:
    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(kind, kind))


MESHES = pytest.mark.parametrize("kind", [AxisType.Explicit, AxisType.Auto], ids=str)
OPT = optax.adam(1e-2)


def _loss(model: Any, x: jax.Array, y: jax.Array) -> jax.Array:
    out = model(x)
    if out.shape[-1] == VOCAB:  # an LM: cross entropy against next tokens
        # One-hot labels, not take_along_axis (optax's integer-label loss), whose gather
        # from vocabulary-sharded logits JAX cannot shard on an Explicit mesh.
        return -(jax.nn.log_softmax(out) * jax.nn.one_hot(y, VOCAB)).sum(-1).mean()
    return jnp.mean((out - y) ** 2)


def _step(model: Any, opt_state: Any, x: jax.Array, y: jax.Array) -> tuple[Any, Any, Any]:
    loss, grads = jax.value_and_grad(_loss)(model, x, y)
    updates, opt_state = OPT.update(grads, opt_state, model)
    return optax.apply_updates(model, updates), opt_state, loss


def _spec(x: Any) -> P:
    """The sharding spec of ``x`` (an array or a ``PartitionSpec``) without trailing
    ``None``s (Auto meshes drop them)."""
    spec = tuple(x if isinstance(x, P) else x.sharding.spec)
    while spec and spec[-1] is None:
        spec = spec[:-1]
    return P(*spec)


def _same_shardings(after: Any, before: Any) -> int:
    a_leaves, b_leaves = jax.tree.leaves(after), jax.tree.leaves(before)
    assert len(a_leaves) == len(b_leaves)
    for a, b in zip(a_leaves, b_leaves):
        assert a.sharding.is_equivalent_to(b.sharding, a.ndim), (a.sharding, b.sharding)
    return sum(1 for b in b_leaves if any(e is not None for e in b.sharding.spec))


def _run(
    build: Callable[[], Any], rules: Any, kind: AxisType, x: Any, y: Any, x_names: Any
) -> tuple[Any, Any, int]:
    """Forward and one adam step unsharded and sharded; returns the sharded model, the
    new one, and the number of sharded leaves (model and optimizer state)."""
    model = build()
    with jax.numpy_dtype_promotion("standard"):
        opt_state = OPT.init(model)
        ref_out = jax.jit(lambda m, x: m(x))(model, x)
        ref_model, ref_opt, ref_loss = jax.jit(_step)(model, opt_state, x, y)
        mesh = _mesh(kind)
        with pm.logical_axis_rules(rules), jax.set_mesh(mesh):
            s_model, s_opt = pm.shard(model, mesh), pm.shard(opt_state, mesh)
            sx = jax.device_put(x, pm.logical_to_mesh_sharding(x_names, mesh))
            sy = jax.device_put(y, pm.logical_to_mesh_sharding(x_names[: y.ndim], mesh))
            out = jax.jit(lambda m, x: m(x))(s_model, sx)
            new_model, new_opt, loss = jax.jit(_step)(s_model, s_opt, sx, sy)
    np.testing.assert_allclose(out, ref_out, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    got = jax.tree_util.tree_leaves_with_path((new_model, new_opt))
    for (path, a), b in zip(got, jax.tree.leaves((ref_model, ref_opt))):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=jax.tree_util.keystr(path))
    sharded = _same_shardings(new_model, s_model) + _same_shardings(new_opt, s_opt)
    return s_model, new_model, sharded


def _data(shape: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
    x = jax.random.normal(jax.random.key(1), shape)
    return x, jax.random.normal(jax.random.key(2), shape)


# ----------------------------------------------------------------------------- layouts


@MESHES
@pytest.mark.parametrize("rules", [DP, TP, FSDP, FSDP_TP], ids=["dp", "tp", "fsdp", "fsdp_tp"])
def test_mlp_layouts(kind: AxisType, rules: Any) -> None:
    x, y = _data((BATCH * 2, D))
    s_model, _, sharded = _run(
        lambda: TPMLP(key=jax.random.key(0)), rules, kind, x, y, ("batch", "embed")
    )
    with pm.logical_axis_rules(rules):
        expected = pm.logical_to_mesh_axes(("embed", "mlp"))
    assert _spec(s_model.up.kernel.value.value) == _spec(expected)
    # Parameters and both adam moments: 4 (TP: kernels and the up bias) or 3 (FSDP).
    assert sharded == {DP: 0, TP: 9, FSDP: 9, FSDP_TP: 12}[rules]


@MESHES
@pytest.mark.parametrize("rules", [TP, FSDP_TP], ids=["tp", "fsdp_tp"])
def test_attention_block_with_heads_over_model(kind: AxisType, rules: Any) -> None:
    x, y = _data((BATCH, LEN, D))
    s_model, _, _ = _run(
        lambda: Block(key=jax.random.key(0)), rules, kind, x, y, ("batch", None, "embed")
    )
    assert _spec(s_model.attn.query.kernel.value.value)[1] == "model"


@MESHES
@pytest.mark.parametrize("rules", [TP, FSDP_TP], ids=["tp", "fsdp_tp"])
def test_lm_with_vocab_sharded_embedding_over_scanned_blocks(kind: AxisType, rules: Any) -> None:
    ids = jax.random.randint(jax.random.key(1), (BATCH * 2, LEN), 0, VOCAB)
    labels = jnp.roll(ids, -1, axis=1)
    s_model, new_model, _ = _run(
        lambda: LM(key=jax.random.key(0)), rules, kind, ids, labels, ("batch", None)
    )
    assert _spec(s_model.embed.embedding.value.value)[0] == "model"
    assert new_model.blocks.attn.query.kernel.value.names == ("layers", "embed", "heads", "kv")


# ----------------------------------------------------------------------------- stacks over data


def _tanh_layer(key: jax.Array) -> pm.nn.Linear:
    return pm.nn.Linear(D, D, kernel_init=kinit("embed", "mlp"), use_bias=False, key=key)


def test_scan_over_a_stack_split_along_its_scanned_axis_is_a_sharding_error() -> None:
    stack = pm.vmap(_tanh_layer, metadata_params=LAYERS)(jax.random.split(jax.random.key(0), 4))
    forward = pm.scan(
        lambda x, layer: jnp.tanh(layer(x)),
        in_axes=(pm.Carry, 0),
        out_axes=pm.Carry,
        metadata_params=LAYERS,
    )
    mesh = jax.make_mesh((2, 4), ("data", "model"))
    with pm.logical_axis_rules((("layers", "data"),)), jax.set_mesh(mesh):
        sharded = pm.shard(stack, mesh)
        with pytest.raises(pm.ShardingError, match=r"4x16x16 sharded P\('data', None, None\)"):
            jax.jit(forward)(jnp.ones((BATCH, D)), sharded)
    # The same stack with the layers axis replicated scans.
    with pm.logical_axis_rules((("layers", None),)), jax.set_mesh(mesh):
        out = jax.jit(forward)(jnp.ones((BATCH, D)), pm.shard(stack, mesh))
    np.testing.assert_allclose(out, forward(jnp.ones((BATCH, D)), stack), rtol=1e-5, atol=1e-6)


def test_vmap_aligns_replicated_mapped_inputs_with_a_sharded_one() -> None:
    """Fresh keys (replicated) mapped with inputs split over data along the mapped axis."""
    keys = jax.random.split(jax.random.key(0), 4)
    x = jax.random.normal(jax.random.key(1), (4, BATCH, D))

    def member(key: jax.Array, x: jax.Array) -> jax.Array:
        return _tanh_layer(key)(x)

    ref = pm.vmap(member)(keys, x)
    mesh = jax.make_mesh((2, 4), ("data", "model"))
    with jax.set_mesh(mesh):
        sx = jax.device_put(x, P("data"))
        out = jax.jit(pm.vmap(member))(keys, sx)
    assert jax.typeof(out).sharding.spec[0] == "data"
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", [AxisType.Explicit, AxisType.Auto])
def test_replicate_axis_gathers_only_an_explicitly_split_dimension(kind: AxisType) -> None:
    x = jnp.arange(8 * 4 * 2, dtype=jnp.float32).reshape(8, 4, 2)
    mesh = _mesh(kind)
    with jax.set_mesh(mesh):
        split = jax.device_put(x, P("data", "model"))

        @jax.jit
        def first_layer(a: jax.Array) -> tuple[jax.Array, jax.Array]:
            whole = pm.replicate_axis(a, 0)
            return whole, jax.lax.index_in_dim(whole, 0, 0, keepdims=False)

        whole, layer = first_layer(split)
        kept = pm.replicate_axis(split, -1)  # the last dimension is not split: unchanged
    np.testing.assert_array_equal(layer, x[0])
    np.testing.assert_array_equal(whole, x)
    assert kept is split
    if kind == AxisType.Explicit:
        assert jax.typeof(whole).sharding.spec == P(None, "model", None)
    assert pm.replicate_axis(x, 0) is x  # no mesh
