"""Every pm.nn layer that contracts, convolves or gathers on an Explicit 2x4 mesh with
logical names only: convolutions, norms over sharded features, recurrent cells, the
attention decode cache; ``out_sharding=`` overrides on layers and functional ops; the
``ShardingError`` a layout the rules cannot resolve raises.

Each case compares the forward pass and the gradients with the unsharded layer and
checks the output's sharding (the rules are in pytreemod/_sharding/_policy.py and the
table in docs/sharding.md).
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import pytreemod as pm
from pytreemod.nn import functional as F
from pytreemod.nn import initializers as init

RULES = (
    ("batch", "data"),
    ("embed", "model"),
    ("out", "model"),
    ("in", "data"),
    ("heads", "model"),
    ("hidden", "model"),
)
KEY = jax.random.key(0)


def lp(fn: Any, *names: str | None) -> Any:
    return pm.with_logical_partitioning(fn, names)


def kinit(*names: str | None) -> Any:
    return lp(init.lecun_normal(), *names)


def _mesh(kind: AxisType = AxisType.Explicit) -> Mesh:
    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(kind, kind))


def _spec(x: Any) -> P:
    spec = tuple(jax.typeof(x).sharding.spec if isinstance(x, jax.Array) else x)
    while spec and spec[-1] is None:
        spec = spec[:-1]
    return P(*spec)


def _check(
    layer: Any,
    x: jax.Array,
    names: tuple[str | None, ...],
    expected: P,
    run: Callable[[Any, Any], Any] | None = None,
) -> None:
    """Forward and gradients of ``run(layer, x)`` sharded equal the unsharded ones; the
    output's sharding is ``expected``; the gradients keep the parameters' shardings."""
    run = run or (lambda m, x: m(x))

    def loss(m: Any, x: Any) -> Any:
        return jnp.mean(run(m, x) ** 2)

    ref, ref_grads = jax.jit(run)(layer, x), jax.jit(jax.grad(loss))(layer, x)
    mesh = _mesh()
    with pm.logical_axis_rules(RULES), jax.set_mesh(mesh):
        sharded = pm.shard(layer, mesh)
        sx = jax.device_put(x, pm.logical_to_mesh_sharding(names, mesh))
        out = jax.jit(run)(sharded, sx)
        grads = jax.jit(jax.grad(loss))(sharded, sx)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    assert _spec(out) == expected
    for g, r, p in zip(
        jax.tree.leaves(grads), jax.tree.leaves(ref_grads), jax.tree.leaves(sharded)
    ):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)
        assert g.sharding.is_equivalent_to(p.sharding, p.ndim), (g.sharding, p.sharding)


def _x(*shape: int) -> jax.Array:
    return jax.random.normal(jax.random.key(1), shape)


# ----------------------------------------------------------------------------- convolutions

CONVS: dict[str, tuple[Callable[[], Any], tuple[int, ...], tuple[Any, ...], P]] = {
    # Column parallel: output features sharded as the kernel's output axis.
    "column": (
        lambda: pm.nn.Conv(
            4, 8, (3, 3), kernel_init=kinit(None, None, None, "out"),
            bias_init=lp(init.zeros, "out"), key=KEY,
        ),
        (4, 6, 6, 4), ("batch", None, None, None), P("data", None, None, "model"),
    ),
    # Row parallel: input channels sharded like the kernel's input axis, reduced.
    "row": (
        lambda: pm.nn.Conv(8, 4, (3,), kernel_init=kinit(None, "out", None), key=KEY),
        (4, 6, 8), ("batch", None, "out"), P("data"),
    ),
    # FSDP: the kernel's input axis over data, gathered before use.
    "fsdp": (
        lambda: pm.nn.Conv(4, 8, (3,), kernel_init=kinit(None, "in", "out"), key=KEY),
        (4, 6, 4), ("batch", None, None), P("data", None, "model"),
    ),
    # Depthwise: channels, kernel outputs and outputs sharded alike.
    "depthwise": (
        lambda: pm.nn.Conv(
            8, 8, (3,), feature_group_count=8, kernel_init=kinit(None, None, "out"), key=KEY
        ),
        (4, 6, 8), ("batch", None, "out"), P("data", None, "model"),
    ),
    # A sharded spatial axis keeps its sharding (XLA exchanges the halos).
    "spatial": (
        lambda: pm.nn.Conv(4, 8, (3,), kernel_init=kinit(None, None, "out"), key=KEY),
        (2, 8, 4), (None, "batch", None), P(None, "data", "model"),
    ),
    "two_batch_axes": (
        lambda: pm.nn.Conv(4, 8, (3,), kernel_init=kinit(None, None, "out"), key=KEY),
        (2, 4, 6, 4), ("batch", None, None, None), P("data", None, None, "model"),
    ),
    "transpose": (
        lambda: pm.nn.ConvTranspose(
            4, 8, (3,), strides=2, kernel_init=kinit(None, None, "out"),
            bias_init=lp(init.zeros, "out"), key=KEY,
        ),
        (4, 6, 4), ("batch", None, None), P("data", None, "model"),
    ),
    "transpose_kernel": (
        lambda: pm.nn.ConvTranspose(
            4, 8, (3,), strides=2, transpose_kernel=True,
            kernel_init=kinit(None, "out", None), key=KEY,
        ),
        (4, 6, 4), ("batch", None, None), P("data", None, "model"),
    ),
    "transpose_circular": (
        lambda: pm.nn.ConvTranspose(
            4, 8, (3,), strides=2, padding="CIRCULAR", kernel_init=kinit(None, None, "out"),
            key=KEY,
        ),
        (4, 6, 4), ("batch", None, None), P("data", None, "model"),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CONVS))
def test_convolutions_on_explicit_mesh(case: str) -> None:
    build, shape, names, expected = CONVS[case]
    _check(build(), _x(*shape), names, expected)


# ----------------------------------------------------------------------------- norms


def _batch_norm_train(m: Any, x: Any) -> Any:
    return pm.apply(m, x, mutable="batch_stats")[0]


NORMS: dict[str, tuple[Callable[[], Any], tuple[int, ...], tuple[Any, ...], P, Any]] = {
    "layer_norm": (
        lambda: pm.nn.LayerNorm(
            8, scale_init=lp(init.ones, "embed"), bias_init=lp(init.zeros, "embed"), key=KEY
        ),
        (8, 8), ("batch", "embed"), P("data", "model"), None,
    ),
    "rms_norm": (
        lambda: pm.nn.RMSNorm(8, scale_init=lp(init.ones, "embed"), key=KEY),
        (8, 8), ("batch", "embed"), P("data", "model"), None,
    ),
    # 8 groups over 4 devices: each holds whole groups, the channels stay sharded.
    "group_norm_whole_groups": (
        lambda: pm.nn.GroupNorm(
            16, num_groups=8, scale_init=lp(init.ones, "embed"),
            bias_init=lp(init.zeros, "embed"), key=KEY,
        ),
        (4, 6, 16), ("batch", None, "embed"), P("data", None, "model"), None,
    ),
    # 2 groups over 4 devices: the channels are gathered first.
    "group_norm_split_groups": (
        lambda: pm.nn.GroupNorm(
            8, num_groups=2, scale_init=lp(init.ones, "embed"),
            bias_init=lp(init.zeros, "embed"), key=KEY,
        ),
        (4, 6, 8), ("batch", None, "embed"), P("data"), None,
    ),
    "batch_norm_train": (
        lambda: pm.nn.BatchNorm(
            8, scale_init=lp(init.ones, "embed"), bias_init=lp(init.zeros, "embed"), key=KEY
        ),
        (8, 8), ("batch", "embed"), P("data", "model"), _batch_norm_train,
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(NORMS))
def test_norms_over_sharded_features(case: str) -> None:
    build, shape, names, expected, run = NORMS[case]
    _check(build(), _x(*shape), names, expected, run)


# ----------------------------------------------------------------------------- recurrent

CELLS = {
    "lstm": pm.nn.LSTMCell,
    "optimized_lstm": pm.nn.OptimizedLSTMCell,
    "gru": pm.nn.GRUCell,
    "mgu": pm.nn.MGUCell,
    "simple": pm.nn.SimpleCell,
}


@pytest.mark.parametrize("cell", list(CELLS))
def test_recurrent_cells_with_hidden_over_model(cell: str) -> None:
    # The carry starts replicated (zeros) and is resharded to the sharding a step gives it.
    rnn = pm.nn.RNN(
        CELLS[cell](
            8,
            16,
            kernel_init=kinit(None, "hidden"),
            recurrent_kernel_init=lp(init.orthogonal(), None, "hidden"),
            key=KEY,
        )
    )
    _check(rnn, _x(4, 5, 8), ("batch", None, None), P("data", None, "model"))


def test_conv_lstm_cell() -> None:
    rnn = pm.nn.RNN(pm.nn.ConvLSTMCell(4, 8, (3,), kernel_init=kinit(None, None, "out"), key=KEY))
    _check(rnn, _x(4, 5, 6, 4), ("batch", None, None, None), P("data", None, None, "model"))


# ----------------------------------------------------------------------------- attention


def _attention() -> pm.nn.MultiHeadAttention:
    return pm.nn.MultiHeadAttention(
        4,
        16,
        kernel_init=kinit("embed_in", "heads", "kv"),
        out_kernel_init=kinit("heads", "kv", "embed_in"),
        use_bias=False,
        key=KEY,
    )


def test_attention_decode_cache_follows_the_heads_sharding() -> None:
    layer, x = _attention(), _x(2, 5, 16)
    full = layer(x, mask=pm.nn.make_causal_mask(jnp.ones((2, 5))), deterministic=True)
    mesh = _mesh()
    with pm.logical_axis_rules(RULES), jax.set_mesh(mesh):
        model = pm.shard(layer.init_cache(2, max_len=8), mesh)
        sx = jax.device_put(x, P("data"))
        step = pm.jit(lambda m, v: pm.apply(m.decode, v, mutable="cache"))
        outs = []
        for t in range(5):
            y, model = step(model, sx[:, t : t + 1])
            outs.append(y)
    np.testing.assert_allclose(jnp.concatenate(outs, axis=1), full, rtol=1e-5, atol=1e-5)
    assert model.cached_key is not None
    assert _spec(pm.unbox(model.cached_key.value)) == P("data", None, "model")
    assert _spec(outs[0]) == P("data")


# ----------------------------------------------------------------------------- overrides


OVERRIDES: dict[str, tuple[Callable[[], Any], tuple[int, ...], Any, P]] = {
    "linear": (
        lambda: pm.nn.Linear(8, 16, kernel_init=kinit(None, "out"), key=KEY),
        (8, 8), lambda m, x: m(x, out_sharding=P("data", None)), P("data"),
    ),
    "mlp": (
        lambda: pm.nn.MLP(8, 16, 8, kernel_init=kinit(None, "out"), key=KEY),
        (8, 8), lambda m, x: m(x, out_sharding=P(None, "model")), P(None, "model"),
    ),
    "conv": (
        lambda: pm.nn.Conv(4, 8, (3,), kernel_init=kinit(None, None, "out"), key=KEY),
        (4, 6, 4), lambda m, x: m(x, out_sharding=P("data", None, "model")),
        P("data", None, "model"),
    ),
    "conv_transpose": (
        lambda: pm.nn.ConvTranspose(4, 8, (3,), kernel_init=kinit(None, None, "out"), key=KEY),
        (4, 6, 4), lambda m, x: m(x, out_sharding=P("data")), P("data"),
    ),
    "attention": (
        _attention,
        (4, 5, 16), lambda m, x: m(x, deterministic=True, out_sharding=P(None, None, "model")),
        P(None, None, "model"),
    ),
    "layer_norm": (
        lambda: pm.nn.LayerNorm(8, scale_init=lp(init.ones, "embed"), key=KEY),
        (8, 8), lambda m, x: m(x, out_sharding=P("data")), P("data"),
    ),
    "max_pool": (
        lambda: pm.nn.MaxPool((2,), strides=(2,)),
        (4, 8, 8), lambda m, x: m(x, out_sharding=P("data", None, "model")),
        P("data", None, "model"),
    ),
    "avg_pool": (
        lambda: pm.nn.AvgPool((2,)),
        (4, 8, 8), lambda m, x: m(x, out_sharding=P(None, None, "model")), P(None, None, "model"),
    ),
    "rnn": (
        lambda: pm.nn.RNN(pm.nn.LSTMCell(8, 8, key=KEY)),
        (4, 5, 8), lambda m, x: m(x, out_sharding=P("data", None, "model")),
        P("data", None, "model"),
    ),
    "bidirectional": (
        lambda: pm.nn.Bidirectional(
            pm.nn.RNN(pm.nn.GRUCell(8, 4, key=KEY)), pm.nn.RNN(pm.nn.GRUCell(8, 4, key=KEY))
        ),
        (4, 5, 8), lambda m, x: m(x, out_sharding=P(None, None, "model")), P(None, None, "model"),
    ),
    "gru_cell": (
        lambda: pm.nn.GRUCell(8, 8, key=KEY),
        (8, 8), lambda m, x: m(m.initialize_carry(x.shape), x, out_sharding=P("data", "model"))[1],
        P("data", "model"),
    ),
    "dropout": (
        lambda: pm.nn.Dropout(0.5),
        (8, 8), lambda m, x: m(x, deterministic=True, out_sharding=P(None, "model")),
        P(None, "model"),
    ),
    "sequential": (
        lambda: pm.nn.Sequential([pm.nn.Linear(8, 8, key=KEY), jax.nn.relu]),
        (8, 8), lambda m, x: m(x, out_sharding=P(None, "model")), P(None, "model"),
    ),
    "lambda": (
        lambda: pm.nn.Lambda(jnp.tanh),
        (8, 8), lambda m, x: m(x, out_sharding=P(None, "model")), P(None, "model"),
    ),
    "identity": (
        pm.nn.Identity, (8, 8), lambda m, x: m(x, out_sharding=P(None, "model")), P(None, "model"),
    ),
}  # fmt: skip


@pytest.mark.parametrize("kind", [AxisType.Explicit, AxisType.Auto], ids=str)
@pytest.mark.parametrize("case", list(OVERRIDES))
def test_out_sharding_override_on_layer_calls(case: str, kind: AxisType) -> None:
    build, shape, run, expected = OVERRIDES[case]
    layer, x = build(), _x(*shape)
    ref = run(layer, x)  # no mesh: the override is ignored
    mesh = _mesh(kind)
    with pm.logical_axis_rules(RULES), jax.set_mesh(mesh):
        sharded = pm.shard(layer, mesh)
        sx = jax.device_put(x, NamedSharding(mesh, P("data")))
        out = jax.jit(run)(sharded, sx)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    assert _spec(out.sharding.spec) == expected


def test_out_sharding_override_on_functional_ops() -> None:
    ids = jnp.arange(8).reshape(4, 2)
    table, x = _x(8, 16), _x(4, 16)
    mesh = _mesh()
    with jax.set_mesh(mesh):
        st = jax.device_put(table, P("model", None))
        si, sx = jax.device_put(ids, P("data")), jax.device_put(x, P("data"))
        emb = jax.jit(lambda t, i: F.embed(i, t, out_sharding=P("data", None, "model")))(st, si)
        logits = jax.jit(lambda q, t: F.attend(q, t, out_sharding=P(None, "model")))(sx, st)
        dense = jax.jit(
            lambda x, k: F.dense_general(x, k, axis=-1, out_sharding=P("data", "model"))
        )(sx, jax.device_put(_x(16, 4), P("model")))
    np.testing.assert_allclose(emb, table[ids], rtol=1e-6)
    np.testing.assert_allclose(logits, x @ table.T, rtol=1e-5, atol=1e-5)
    assert dense.shape == (4, 4)
    assert (_spec(emb), _spec(logits), _spec(dense)) == (
        P("data", None, "model"),
        P(None, "model"),
        P("data", "model"),
    )


def test_out_sharding_override_on_functional_pool_and_recurrent_ops() -> None:
    x, h = _x(4, 8, 8), _x(4, 8)
    project = F.dense_projections({n: {"kernel": _x(8, 8)} for n in ("i", "h")})
    mesh = _mesh()
    with jax.set_mesh(mesh):
        sx, sh = jax.device_put(x, P("data")), jax.device_put(h, P("data"))
        pooled = jax.jit(lambda v: F.max_pool(v, (2,), out_sharding=P(None, None, "model")))(sx)
        carry, y = jax.jit(
            lambda c, v: F.simple_cell(c, v, project, out_sharding=P("data", "model"))
        )(sh, sx[:, 0])
    np.testing.assert_allclose(pooled, F.max_pool(x, (2,)), rtol=1e-6)
    np.testing.assert_allclose(y, F.simple_cell(h, x[:, 0], project)[1], rtol=1e-5, atol=1e-5)
    assert (_spec(pooled), _spec(carry), _spec(y)) == (
        P(None, None, "model"),
        P("data", "model"),
        P("data", "model"),
    )


# ----------------------------------------------------------------------------- errors


class Block(pm.Module):
    attn: pm.nn.MultiHeadAttention

    def __init__(self) -> None:
        self.attn = _attention()

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.attn(x, deterministic=True)


def test_a_layout_the_rules_cannot_resolve_is_a_sharding_error() -> None:
    # Head features over `model` on both sides of the logits' contraction: JAX cannot
    # tell how to shard the result; the error names the layer, op, operands and the fix.
    block = Block()
    mesh = _mesh()
    with pm.logical_axis_rules((("batch", "data"), ("kv", "model"))), jax.set_mesh(mesh):
        sharded = pm.shard(block, mesh)
        x = jax.device_put(_x(2, 5, 16), P("data"))
        with pytest.raises(
            pm.ShardingError,
            match=r"Block\.attn: pytreemod\.nn\.functional\.dot_product_attention on an "
            r"Explicit mesh \(query: 2x5x4x4 sharded P\('data', None, None, 'model'\), key: "
            r".*\): JAX cannot shard it .*Fix: add a logical axis rule .* or pass "
            r"out_sharding=",
        ):
            jax.jit(lambda m, x: m(x))(sharded, x)


def test_operands_on_two_meshes_are_a_sharding_error() -> None:
    layer = pm.nn.Linear(16, 8, kernel_init=kinit(None, "out"), key=KEY)
    other = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
    with pm.logical_axis_rules(RULES):
        placed = pm.shard(layer, other)
    x = jax.device_put(_x(8, 16), NamedSharding(_mesh(), P("data")))
    with pytest.raises(
        pm.ShardingError,
        match=r"Linear: pytreemod\.nn\.functional\.linear on an Explicit mesh \(x: 8x16 "
        r"sharded P\('data', None\), kernel: 16x8 sharded P\(None, 'model'\)\): kernel is "
        r"on mesh \{'data': 4, 'model': 2\} but another operand is on mesh \{'data': 2, "
        r"'model': 4\}\. Fix: place every parameter and input on one mesh",
    ):
        placed(x)


@pytest.mark.parametrize(
    ("equation", "kernel_spec", "expected"),
    [
        ("btd,dhk->bthk", P("model"), P("data")),  # row parallel: reduced
        ("btd,dhk->bhtk", P(None, None, "model"), P("data", None, None, "model")),
        ("btd,dhk->bthk", P("data", None, "model"), P("data", None, None, "model")),  # FSDP
    ],
)
def test_einsum_dense_derives_its_output_sharding(
    equation: str, kernel_spec: P, expected: P
) -> None:
    x, kernel, bias = _x(4, 6, 8), _x(8, 2, 4), jnp.ones((2, 4))
    ref = F.einsum_dense(x, kernel, bias, equation=equation)
    with jax.set_mesh(_mesh()):
        sx, sk = jax.device_put(x, P("data")), jax.device_put(kernel, kernel_spec)
        y = jax.jit(lambda x, k: F.einsum_dense(x, k, bias, equation=equation))(sx, sk)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    assert _spec(y) == expected


def test_dropout_mask_takes_the_input_sharding_on_an_explicit_mesh() -> None:
    x = jnp.arange(16.0).reshape(4, 4) + 1.0
    with jax.set_mesh(_mesh()):
        xs = jax.sharding.reshard(x, P("data", "model"))
        y = F.dropout(xs, 0.5, KEY)
        assert _spec(y) == P("data", "model")
        # broadcast along the features: the mask is replicated there, still no reshard
        yb = F.dropout(xs, 0.5, KEY, broadcast_dims=(1,))
        assert _spec(yb) == P("data", "model")
    kept = np.asarray(yb) != 0
    assert (kept == kept[:, :1]).all()  # one choice per row
    np.testing.assert_allclose(np.asarray(yb)[kept], 2 * np.asarray(x)[kept])
