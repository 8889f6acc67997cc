"""Differences found by running whole NNX programs under ``flax.nnx`` and ``adapters.nnx``
side by side (training loops, samplers, sharded models, Linen/NNX mixes): each test
pins one behaviour to what the installed Flax does."""

import re
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import nnx as fnnx

from adapters import nnx

LIBS = [pytest.param(fnnx, id="flax"), pytest.param(nnx, id="adapters")]


def _strip_addresses(text: str) -> str:
    return re.sub(r"0x[0-9a-f]+", "0x", text)


# --- a static attribute that cannot be hashed (a config dict) -------------------------


def _configured(lib: Any) -> Any:
    class Configured(lib.Module):
        def __init__(self, rngs: Any) -> None:
            self.linear = lib.Linear(2, 2, rngs=rngs)
            self.config = {"scale": 3, "sizes": [2, 2]}  # unhashable, static

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.linear(x) * self.config["scale"]

    return Configured(lib.Rngs(0))


def test_unhashable_static_attribute_goes_through_transforms() -> None:
    # JAX compares aux data with == and never hashes it; Flax's transforms accept such
    # modules, so ours must not hash the GraphDef either.
    x = jnp.ones((1, 2))
    model = _configured(nnx)
    traces = []

    @nnx.jit
    def forward(model: Any, x: jax.Array) -> jax.Array:
        traces.append(1)
        return model(x)

    forward(model, x)
    out = forward(model, x)  # equal GraphDefs: the same trace
    assert len(traces) == 1
    assert jnp.allclose(out, model.linear(x) * 3)
    grads = nnx.grad(lambda m: m(x).sum())(model)
    assert jnp.allclose(grads["linear"]["kernel"][...], 3.0)
    abstract = nnx.eval_shape(lambda: _configured(nnx))
    assert abstract.config == {"scale": 3, "sizes": [2, 2]}
    assert abstract.linear.kernel.shape == (2, 2)
    with pytest.raises(TypeError, match="unhashable"):  # as in Flax: hash is refused
        hash(nnx.graphdef(model))


# --- nnx.eval_shape under a mesh -------------------------------------------------------


def _sharded_linear(lib: Any) -> Any:
    init = lib.with_partitioning(lib.initializers.lecun_normal(), ("embed", "mlp"))
    return lib.Linear(4, 8, kernel_init=init, rngs=lib.Rngs(0))


@pytest.mark.parametrize("lib", LIBS)
def test_eval_shape_gives_abstract_values_their_sharding(lib: Any) -> None:
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    rules = (("embed", "data"), ("mlp", "model"))
    with jax.set_mesh(mesh), lib.logical_axis_rules(rules):
        abstract = lib.eval_shape(lambda: _sharded_linear(lib))
    kernel, bias = abstract.kernel.get_value(), abstract.bias.get_value()
    assert kernel.sharding.spec == jax.sharding.PartitionSpec("data", "model")
    assert bias.sharding.spec == jax.sharding.PartitionSpec()  # no metadata: replicated
    assert kernel.shape == (4, 8)
    outside = lib.eval_shape(lambda: lib.Linear(4, 8, rngs=lib.Rngs(0)))  # no mesh
    assert outside.kernel.get_value().sharding is None


# --- attribute order after graph-update transforms -------------------------------------


def _order_after(lib: Any, transform: str, graph: bool) -> list[str]:
    linear = lib.Linear(2, 3, rngs=lib.Rngs(0))
    x = jnp.ones((1, 2))
    kw = {"graph": graph, "graph_updates": graph}
    if transform == "jit":
        lib.jit(lambda m: m(x), **kw)(linear)
    elif transform == "grad":
        lib.grad(lambda m: m(x).sum(), **kw)(linear)
    elif transform == "vmap":
        lib.vmap(lambda m, x: m(x), in_axes=(None, 0), **kw)(linear, jnp.ones((3, 1, 2)))
    elif transform == "scan":
        lib.scan(lambda m, x: (m, m(x)), in_axes=(lib.Carry, 0), out_axes=(lib.Carry, 0), **kw)(
            linear, jnp.ones((3, 1, 2))
        )
    else:
        lib.fori_loop(0, 2, lambda i, m: m, linear, **kw)
    return list(vars(linear))


@pytest.mark.parametrize("transform", ["jit", "grad", "vmap", "scan", "fori_loop"])
def test_graph_update_transforms_leave_attributes_in_name_order(transform: str) -> None:
    ours = _order_after(nnx, transform, graph=True)
    assert ours == _order_after(fnnx, transform, graph=True)
    assert ours == sorted(ours)
    untouched = _order_after(nnx, transform, graph=False)  # tree mode keeps __init__'s order
    assert untouched == _order_after(fnnx, transform, graph=False)
    assert untouched != sorted(untouched)


def test_repr_after_training_step_lists_attributes_like_flax() -> None:
    def trained(lib: Any) -> str:
        model = lib.Einsum("bd,dh->bh", (2, 3), rngs=lib.Rngs(0))
        lib.jit(lambda m: m(jnp.ones((1, 2))))(model)
        return _strip_addresses(repr(model))

    assert trained(nnx) == trained(fnnx)


# --- reprs of nnx.List / nnx.Dict ------------------------------------------------------


def _containers(lib: Any) -> Any:
    class Holder(lib.Module):
        def __init__(self, rngs: Any) -> None:
            self.layers = lib.List([lib.Linear(1, 2, rngs=rngs), lib.relu])
            self.named = lib.Dict(head=lib.Linear(2, 1, rngs=rngs), w=lib.Param(jnp.ones(2)))
            self.empty = lib.List([])

    return Holder(lib.Rngs(0))


def test_list_and_dict_print_as_flax_prints_them() -> None:
    ours, theirs = _containers(nnx), _containers(fnnx)
    assert _strip_addresses(repr(ours)) == _strip_addresses(repr(theirs))
    assert _strip_addresses(repr(ours.named)) == _strip_addresses(repr(theirs.named))
    assert repr(nnx.List([1, 2])) == repr(fnnx.List([1, 2])) == "List([\n  1,\n  2\n])"
    assert repr(ours.empty) == "List([])"


# --- warnings --------------------------------------------------------------------------


@pytest.mark.parametrize("lib", LIBS)
def test_sow_and_perturb_warnings_carry_flax_text(lib: Any) -> None:
    class Probe(lib.Module):
        def __call__(self, x: jax.Array) -> jax.Array:
            self.sow(lib.Intermediate, "seen", x)
            return self.perturb("grad_x", x)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Probe()(jnp.ones(2))
    sow, perturb = (str(w.message) for w in caught)
    guide = "https://flax.readthedocs.io/en/latest/guides/extracting_intermediates.html"
    assert sow == (
        "Using 'Module.sow()' outside of 'nnx.capture()' is deprecated; see\n"
        f"        {guide} for more information.\n        "
    )
    assert perturb == (
        "\n      Using 'Module.perturb()' outside of 'nnx.capture()' is deprecated; see\n"
        f"      {guide} for more information.\n      "
    )


@pytest.mark.parametrize("lib", LIBS)
def test_state_method_deprecation_is_attributed_to_the_library(lib: Any) -> None:
    # Python's default filters show a DeprecationWarning only when it is attributed to
    # __main__: Flax attributes State's to its own module, so scripts do not print it.
    state = lib.state(lib.BatchNorm(2, rngs=lib.Rngs(0)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state.split(lib.Param, ...)
    (warning,) = caught
    assert "will be deprecated and be replaced by the built-in" in str(warning.message)
    assert warning.filename.endswith("statelib.py")


# --- a container-valued Variable changed in place inside a transform -------------------


@pytest.mark.parametrize("lib", LIBS)
def test_item_set_in_a_dict_variable_inside_jit_reaches_the_caller(lib: Any) -> None:
    class Recorder(lib.Module):
        def __init__(self) -> None:
            self.seen = lib.data(lib.Intermediate({}))

    recorder = Recorder()

    @lib.jit
    def record(r: Any, x: jax.Array) -> jax.Array:
        r.seen["tripled"] = x * 3  # the dict is changed in place
        return x

    record(recorder, jnp.asarray(1.0))
    assert float(recorder.seen.get_value()["tripled"]) == 3.0
    record(recorder, jnp.asarray(2.0))
    assert float(recorder.seen.get_value()["tripled"]) == 6.0


@pytest.mark.parametrize("lib", LIBS)
def test_capture_of_a_jitted_method_gives_perturbation_gradients(lib: Any) -> None:
    class Tripler(lib.Module):
        @lib.jit
        def __call__(self, x: jax.Array) -> jax.Array:
            y = 3 * self.perturb("grad_of_x", x)
            self.sow(lib.Intermediate, "y", y)
            return y

    model = Tripler()
    _, perturbations = lib.capture(model, lib.Perturbation)(1.0)

    def loss(model: Any, perturbations: Any) -> Any:
        return lib.capture(model, lib.Intermediate, init=perturbations)(1.0)

    grads, sowed = lib.grad(loss, argnums=1, has_aux=True)(model, perturbations)
    assert float(grads["grad_of_x"].get_value()) == 3.0
    (y,) = sowed["y"].get_value()
    assert float(y) == 3.0


# --- to_tree / from_tree and Variable prefixes -----------------------------------------


def test_to_tree_splits_a_shared_node_once_and_from_tree_joins_it_again() -> None:
    linear = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    pure = nnx.to_tree((linear, 1, {"again": linear}))
    first, again = pure[0], pure[2]["again"]
    assert isinstance(first.graphdef.nodes[0], nnx.graphlib.NodeDef)
    assert isinstance(again.graphdef.nodes[0], nnx.graphlib.NodeRef)
    assert len(nnx.to_flat_state(first.states[0])) == 2
    assert len(nnx.to_flat_state(again.states[0])) == 0
    back = nnx.from_tree(pure)
    assert back[0] is back[2]["again"] and back[1] == 1
    with pytest.raises(ValueError, match="Expected TreeNode"):
        nnx.from_tree((pure[0], 2), map_non_graph_nodes=True)


def test_to_tree_passes_prefixes_to_split_fn_and_a_prefix_nodestates_broadcasts() -> None:
    module = nnx.BatchNorm(3, rngs=nnx.Rngs(0))
    seen = []

    def split_fn(ctx: Any, path: Any, prefix: Any, node: Any) -> Any:
        seen.append(prefix)
        return nnx.NodeStates.from_split(*ctx.split(node, nnx.Param, nnx.BatchStat))

    pure = nnx.to_tree((module,), prefix=("axes",), split_fn=split_fn)
    assert seen == ["axes"]
    prefix = (nnx.NodeStates.from_prefixes((None, 0)),)
    # A prefix NodeStates has no GraphDef: its None stands over the node's GraphDef.
    jax.tree_util.tree_map(lambda *_: None, prefix, pure, is_leaf=lambda x: x is None)


@pytest.mark.parametrize("lib", LIBS)
def test_vmap_with_a_prefix_made_for_a_variable(lib: Any) -> None:
    v = lib.Param(jnp.ones((4, 2, 3)))
    axes = lib.prefix(v, {lib.Param: 0}, graph=True)
    forward = lib.vmap(lambda v, x: x @ v, in_axes=(axes, None), graph_updates=False)
    assert forward(v, jnp.ones((2,))).shape == (4, 3)


# --- objects created inside vmap that point at the inputs ------------------------------


@pytest.mark.parametrize("lib", LIBS)
def test_submodule_created_in_vmap_shares_the_callers_rngs(lib: Any) -> None:
    class Holder(lib.Module):
        def __init__(self) -> None:
            self.rngs = lib.Rngs(0)

    holder = Holder()
    axes = lib.StateAxes({lib.RngState: 0, ...: None})

    @lib.split_rngs(splits=2)
    @lib.vmap(in_axes=(axes,), axis_size=2)
    def attach(parent: Any) -> None:
        child = lib.Module()
        child.rngs = parent.rngs  # the input's Rngs, seen from inside
        parent.child = child

    attach(holder)
    assert holder.child.rngs is holder.rngs
    assert holder.rngs.default.key.get_value().shape == ()  # split_rngs restored it


@pytest.mark.parametrize("lib", LIBS)
def test_variable_created_in_a_scanned_module_comes_back_stacked(lib: Any) -> None:
    class Lazy(lib.Module):
        def __init__(self) -> None:
            self.scale = lib.Param(jnp.arange(3.0))  # one per step

        def __call__(self, x: jax.Array) -> jax.Array:
            if not hasattr(self, "bias"):  # created on first use, inside the scan
                self.bias = lib.Param(jnp.ones(()) * self.scale[...])
            return x * self.scale[...] + self.bias[...]

    lazy = Lazy()
    step = lib.scan(lambda m, x: (m(x), None), in_axes=(0, lib.Carry), out_axes=(lib.Carry, 0))
    out, _ = step(lazy, jnp.ones(()))
    assert lazy.bias.shape == (3,)
    assert jnp.allclose(lazy.bias[...], jnp.arange(3.0))
    assert float(out) == 4.0  # ((1 * 0 + 0) * 1 + 1) * 2 + 2


# --- shape mismatches are caught by the exception class JAX raises ----------------------


@pytest.mark.parametrize("lib", LIBS)
def test_channel_mismatch_in_conv_is_a_value_error(lib: Any) -> None:
    # JAX reports a convolution's channel mismatch as ValueError and a matmul's as
    # TypeError; programs that catch either keep working (ours says more).
    conv = lib.Conv(3, 4, kernel_size=(3, 3), rngs=lib.Rngs(0))
    with pytest.raises(ValueError, match="5"):
        conv(jnp.ones((1, 6, 6, 5)))
    linear = lib.Linear(3, 4, rngs=lib.Rngs(0))
    with pytest.raises(TypeError):
        linear(jnp.ones((2, 5)))
