"""Linen models written with logical partitioning only (``nn.with_logical_partitioning``
and ``nn.logical_axis_rules``), on Explicit and Auto 2x4 meshes: init places every
parameter by its logical names, forward and an adam step equal the unsharded model, and
the step keeps the shardings; so do a scanned stack and a vmapped ensemble whose
parameters carry a ``layers`` axis (``metadata_params``). Flax itself has no
Explicit-mesh support; the Linen layers run through the same pure functions as pm.nn,
which derive output shardings from types.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

import pytreemod as pm
from adapters import linen as nn
from adapters import traverse_util
from pytreemod.nn import functional as F

D, H, HEADS, VOCAB, BATCH, LEN = 16, 32, 4, 24, 8, 6

TP = (("batch", "data"), ("mlp", "model"), ("heads", "model"), ("vocab", "model"))
FSDP_TP = (*TP, ("embed", "data"))


def kinit(*names: str | None) -> Any:
    return nn.with_logical_partitioning(nn.initializers.lecun_normal(), names)


def const(fn: Any, *names: str | None) -> Any:
    return nn.with_logical_partitioning(fn, names)


class MLP(nn.Module):
    """Column-parallel up projection, row-parallel down projection."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        zeros = nn.initializers.zeros
        x = nn.Dense(H, kernel_init=kinit("embed", "mlp"), bias_init=const(zeros, "mlp"))(x)
        # An activation constraint: a reshard on Explicit axes, a sharding constraint on Auto.
        x = nn.with_logical_constraint(x, ("batch", *[None] * (x.ndim - 2), "mlp"))
        x = nn.Dense(D, kernel_init=kinit("mlp", "embed"), bias_init=const(zeros, "embed"))(
            jax.nn.gelu(x)
        )
        return x


class Attention(nn.Module):
    """Heads over ``model``: query/key/value column-parallel, the output row-parallel."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))
        y = nn.MultiHeadDotProductAttention(
            HEADS,
            kernel_init=kinit("embed", "heads", "kv"),
            out_kernel_init=kinit("heads", "kv", "embed"),
            # No biases: the key bias's gradient is zero up to rounding, which adam's
            # normalisation turns into different steps on different layouts.
            use_bias=False,
            deterministic=True,
        )(nn.LayerNorm(scale_init=const(nn.initializers.ones, "embed"))(x), mask=mask)
        return x + y


class TiedLM(nn.Module):
    """A vocabulary-sharded embedding whose ``attend`` gives the logits."""

    @nn.compact
    def __call__(self, ids: jax.Array) -> jax.Array:
        embed = nn.Embed(
            VOCAB, D, embedding_init=const(nn.initializers.normal(1.0), "vocab", "embed")
        )
        x = embed(ids)
        x = x + MLP()(nn.LayerNorm(use_bias=False)(x))
        return embed.attend(x)


class NormNet(nn.Module):
    """BatchNorm (batch statistics updated by the step) and LayerNorm around a Dense."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        ones, zeros = nn.initializers.ones, nn.initializers.zeros
        x = nn.BatchNorm(
            use_running_average=False,
            scale_init=const(ones, "embed"),
            bias_init=const(zeros, "embed"),
        )(x)
        x = nn.Dense(H, kernel_init=kinit("embed", "mlp"), bias_init=const(zeros, "mlp"))(x)
        return nn.LayerNorm(scale_init=const(ones, "mlp"), bias_init=const(zeros, "mlp"))(x)


# ----------------------------------------------------------------------------- harness


def _mesh(kind: AxisType) -> Mesh:
    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(kind, kind))


MESHES = pytest.mark.parametrize("kind", [AxisType.Explicit, AxisType.Auto], ids=str)
RULES = pytest.mark.parametrize("rules", [TP, FSDP_TP], ids=["tp", "fsdp_tp"])
OPT = optax.adam(1e-2)


def _loss(model: nn.Module, params: Any, extra: Any, x: jax.Array, y: jax.Array) -> Any:
    out, updated = model.apply({"params": params, **extra}, x, mutable=list(extra))
    if out.shape[-1] == VOCAB:  # an LM: cross entropy against next tokens
        # optax's integer-label loss, which leaves the vocabulary-sharded logits sharded.
        loss = F.softmax_cross_entropy_with_integer_labels(out, y).mean()
    else:
        loss = jnp.mean((out - y) ** 2)
    return loss, updated


def _step(model: nn.Module, params: Any, extra: Any, opt: Any, x: Any, y: Any) -> Any:
    (loss, extra), grads = jax.value_and_grad(_loss, argnums=1, has_aux=True)(
        model, params, extra, x, y
    )
    updates, opt = OPT.update(grads, opt, params)
    return optax.apply_updates(params, updates), extra, opt, loss


def _spec(spec: P) -> P:
    """``spec`` without trailing ``None``s (Auto meshes drop them)."""
    entries = tuple(spec)
    while entries and entries[-1] is None:
        entries = entries[:-1]
    return P(*entries)


def _is_sharding(x: Any) -> bool:
    return isinstance(x, jax.sharding.Sharding)


def _forward(model: nn.Module, params: Any, extra: Any, x: jax.Array) -> jax.Array:
    apply = jax.jit(model.apply, static_argnames="mutable")
    out, _ = apply({"params": params, **extra}, x, mutable=tuple(extra))
    return out


def _split(variables: Any) -> tuple[Any, Any]:
    variables = nn.unbox(variables)
    return variables["params"], {k: v for k, v in variables.items() if k != "params"}


_REFERENCES: dict[Any, Any] = {}


def _reference(model: nn.Module, x: Any, y: Any) -> tuple[Any, Any]:
    """The unsharded forward output and step result, computed once per model and inputs
    (every mesh kind and rule set of a test compares with the same one)."""
    key = (model, *(np.asarray(a).tobytes() + str(a.shape).encode() for a in (x, y)))
    if key not in _REFERENCES:
        with jax.numpy_dtype_promotion("standard"):
            params, extra = _split(model.init(jax.random.key(0), x))
            out = _forward(model, params, extra, x)
            step = jax.jit(_step, static_argnums=0)
            _REFERENCES[key] = out, step(model, params, extra, OPT.init(params), x, y)
    return _REFERENCES[key]


def _run(model: nn.Module, rules: Any, kind: AxisType, x: Any, y: Any, x_names: Any) -> Any:
    """Init, forward and one adam step unsharded and on the mesh; returns the sharded
    params after the step."""
    key = jax.random.key(0)
    step = jax.jit(_step, static_argnums=0)
    ref_out, ref_new = _reference(model, x, y)
    with jax.numpy_dtype_promotion("standard"):
        mesh = _mesh(kind)
        with nn.logical_axis_rules(rules), jax.set_mesh(mesh):
            x_sharding = nn.logical_to_mesh_sharding(P(*x_names), mesh, rules)
            y_sharding = nn.logical_to_mesh_sharding(P(*x_names[: y.ndim]), mesh, rules)
            sx, sy = jax.device_put(x, x_sharding), jax.device_put(y, y_sharding)
            # Init sees the input laid out as in training (its activation constraints too).
            specs = nn.get_partition_spec(jax.eval_shape(model.init, key, sx))
            want = nn.logical_to_mesh_sharding(specs, mesh, rules)
            params, extra = _split(jax.jit(model.init, out_shardings=want)(key, sx))
            out = _forward(model, params, extra, sx)
            new = step(model, params, extra, OPT.init(params), sx, sy)
    np.testing.assert_allclose(out, ref_out, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(new[3], ref_new[3], rtol=1e-5)
    got = jax.tree_util.tree_leaves_with_path(new[:3])
    for (path, a), b in zip(got, jax.tree.leaves(ref_new[:3]), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=jax.tree_util.keystr(path))
    wants = jax.tree.leaves(want["params"], is_leaf=_is_sharding)
    assert any(not w.is_fully_replicated for w in wants)
    # Init placed the params by their names; the step keeps them, and adam's moments follow.
    # On Auto meshes XLA may still move an unnamed (replicated) leaf, as in Flax; on
    # Explicit meshes every leaf's type is kept.
    for tree in (params, new[0], new[2][0].mu, new[2][0].nu):
        for a, w in zip(jax.tree.leaves(tree), wants, strict=True):
            if kind == AxisType.Explicit or not w.is_fully_replicated:
                assert a.sharding.is_equivalent_to(w, a.ndim), (a.sharding, w)
    return new[0]


# ----------------------------------------------------------------------------- layouts


@MESHES
@RULES
def test_tensor_parallel_mlp(kind: AxisType, rules: Any) -> None:
    xy = jax.random.normal(jax.random.key(1), (2, BATCH, D))
    params = _run(MLP(), rules, kind, xy[0], xy[1], ("batch", "embed"))
    kernel = params["Dense_0"]["kernel"]
    assert _spec(kernel.sharding.spec) == _spec(P("data" if rules == FSDP_TP else None, "model"))


@MESHES
@RULES
def test_attention_with_heads_over_model(kind: AxisType, rules: Any) -> None:
    xy = jax.random.normal(jax.random.key(1), (2, BATCH, LEN, D))
    params = _run(Attention(), rules, kind, xy[0], xy[1], ("batch", None, "embed"))
    query = params["MultiHeadDotProductAttention_0"]["query"]["kernel"]
    assert _spec(query.sharding.spec)[1] == "model"


@MESHES
@RULES
def test_vocab_sharded_embed_and_attend(kind: AxisType, rules: Any) -> None:
    ids = jax.random.randint(jax.random.key(1), (BATCH, LEN), 0, VOCAB)
    params = _run(TiedLM(), rules, kind, ids, jnp.roll(ids, -1, axis=1), ("batch", None))
    assert _spec(params["Embed_0"]["embedding"].sharding.spec)[0] == "model"


@MESHES
@RULES
def test_batch_norm_and_layer_norm(kind: AxisType, rules: Any) -> None:
    x = jax.random.normal(jax.random.key(1), (BATCH, D))
    y = jax.random.normal(jax.random.key(2), (BATCH, H))
    params = _run(NormNet(), rules, kind, x, y, ("batch", "embed"))
    assert _spec(params["LayerNorm_0"]["scale"].sharding.spec) == P("model")


# ----------------------------------------------------------------------------- stacks

STACK = 4
LAYER_AXIS = {nn.PARTITION_NAME: "layers"}


class ScannedBlock(nn.Module):
    """One residual MLP block, the body of a scan (the carry keeps its sharding)."""

    @nn.compact
    def __call__(self, x: jax.Array, _: Any) -> tuple[jax.Array, None]:
        return x + MLP()(x), None


class ScannedStack(nn.Module):
    """``STACK`` blocks as one scanned module: every parameter gains a ``layers`` axis."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        blocks = nn.scan(
            ScannedBlock,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            length=STACK,
            metadata_params=LAYER_AXIS,
        )
        return blocks()(x, None)[0]


class Ensemble(nn.Module):
    """``STACK`` independent MLPs, each applied to its own slice of the input."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        members = nn.vmap(
            MLP,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=0,
            metadata_params=LAYER_AXIS,
        )
        return members()(x)


def _names(variables: Any) -> dict[str, Any]:
    flat = traverse_util.flatten_dict(dict(variables["params"]), sep="/")
    return {k: v.names for k, v in flat.items()}


@MESHES
@RULES
def test_scanned_stack_with_a_layers_axis(kind: AxisType, rules: Any) -> None:
    rules = (("layers", None), *rules)
    xy = jax.random.normal(jax.random.key(1), (2, BATCH, D))
    names = _names(ScannedStack().init(jax.random.key(0), xy[0]))
    assert names["ScanScannedBlock_0/MLP_0/Dense_0/kernel"] == ("layers", "embed", "mlp")
    assert all(n[0] == "layers" for n in names.values())
    params = _run(ScannedStack(), rules, kind, xy[0], xy[1], ("batch", "embed"))
    kernel = params["ScanScannedBlock_0"]["MLP_0"]["Dense_0"]["kernel"]
    assert kernel.shape == (STACK, D, H)
    fsdp = "data" if rules[-1] == ("embed", "data") else None
    assert _spec(kernel.sharding.spec) == P(None, fsdp, "model")


@MESHES
@RULES
def test_vmapped_ensemble_with_a_layers_axis(kind: AxisType, rules: Any) -> None:
    rules = (("layers", None), *rules)
    xy = jax.random.normal(jax.random.key(1), (2, STACK, BATCH, D))
    names = _names(Ensemble().init(jax.random.key(0), xy[0]))
    assert names["VmapMLP_0/Dense_1/kernel"] == ("layers", "mlp", "embed")
    params = _run(Ensemble(), rules, kind, xy[0], xy[1], (None, "batch", "embed"))
    kernel = params["VmapMLP_0"]["Dense_1"]["kernel"]
    fsdp = "data" if rules[-1] == ("embed", "data") else None
    assert _spec(kernel.sharding.spec) == _spec(P(None, "model", fsdp))


SPLIT = (("layers", "data"), ("mlp", "model"), ("heads", "model"))  # members over data


@MESHES
def test_vmapped_ensemble_split_over_data(kind: AxisType) -> None:
    xy = jax.random.normal(jax.random.key(1), (2, STACK, BATCH, D))
    # The members (and their inputs) over data: the freshly split init keys follow them.
    params = _run(Ensemble(), SPLIT, kind, xy[0], xy[1], ("layers", None, "embed"))
    kernel = params["VmapMLP_0"]["Dense_0"]["kernel"]
    assert _spec(kernel.sharding.spec) == P("data", None, "model")


def test_scanned_stack_split_over_data_runs_on_auto_axes() -> None:
    xy = jax.random.normal(jax.random.key(1), (2, BATCH, D))
    params = _run(ScannedStack(), SPLIT, AxisType.Auto, xy[0], xy[1], (None, "embed"))
    kernel = params["ScanScannedBlock_0"]["MLP_0"]["Dense_0"]["kernel"]
    assert _spec(kernel.sharding.spec) == P("data", None, "model")


def test_scanned_stack_split_over_data_on_an_explicit_mesh_is_a_sharding_error() -> None:
    x = jax.random.normal(jax.random.key(1), (BATCH, D))
    mesh = _mesh(AxisType.Explicit)
    with nn.logical_axis_rules(SPLIT), jax.set_mesh(mesh):
        specs = nn.get_partition_spec(jax.eval_shape(ScannedStack().init, jax.random.key(0), x))
        want = nn.logical_to_mesh_sharding(specs, mesh, SPLIT)
        variables = jax.jit(ScannedStack().init, out_shardings=want)(jax.random.key(0), x)
        with pytest.raises(pm.ShardingError, match="JAX scans only over a replicated axis"):
            ScannedStack().apply(variables, x)


def test_unbox_of_a_partitioned_value_reshards_on_an_explicit_mesh() -> None:
    """Flax's ``Partitioned.unbox`` constrains the value by its names under a mesh; on an
    Explicit mesh a value sharded otherwise is resharded (JAX's constraint would refuse)."""
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
    with jax.set_mesh(mesh):
        value = jax.device_put(jnp.arange(32.0).reshape(8, 4), P("data", None))
        box = nn.Partitioned(value, names=(None, "model"))
        out = nn.unbox({"w": box})["w"]
    assert out.sharding.spec == P(None, "model")
    np.testing.assert_array_equal(out, value)
