"""The bridge's round-trip laws, under hypothesis, over random models.

- Linen -> pytreemod -> Linen: ``from_linen(m, v).to_linen() == (m, v)``, every value,
  collection and box kept; a stateful step (BatchNorm statistics, attention decode
  cache, sown intermediates) taken on either side gives the same output and variables.
- pytreemod -> Linen -> pytreemod: ``ToLinen(model)``'s variables rebuild ``model``
  exactly; a step through Linen's ``apply(..., mutable=...)`` or through ``from_linen``
  and ``pm.apply`` gives the model ``pm.apply`` gives.
"""

from typing import Any

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
from hypothesis import given, settings

import pytreemod as pm
from adapters import bridge
from adapters import linen as nn

SETTINGS = settings(max_examples=10, deadline=None)
F = 4  # features of every layer
COLLECTIONS = ("params", "constants", "lora_params", "stats")


def _same(a: Any, b: Any, exact: bool = False) -> bool:
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    if ta != tb:
        return False
    close = jnp.array_equal if exact else lambda x, y: jnp.allclose(x, y, atol=1e-5)
    return all(bool(close(x, y)) for x, y in zip(la, lb, strict=True))


def _boxes(tree: Any) -> list[Any]:
    leaves = jax.tree.leaves(tree, is_leaf=pm.is_box)
    return [(type(x), getattr(x, "names", None)) for x in leaves if pm.is_box(x)]


# ------------------------------------------------------------------ Linen -> pytreemod


def _ramp() -> jax.Array:
    return jnp.arange(F, dtype=jnp.float32) / F


def _boxed_ramp() -> pm.Partitioned:
    return nn.Partitioned(_ramp(), ("embed",))


class LinenStack(nn.Module):
    """A random stack: ``specs`` is a tuple of ``(kind, option)``."""

    specs: tuple[tuple[str, Any], ...]

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        for i, (kind, option) in enumerate(self.specs):
            if kind == "dense":
                init = nn.initializers.lecun_normal()
                if option == "partitioned":
                    init = nn.with_partitioning(init, ("embed", "mlp"))
                elif option == "logical":
                    init = nn.with_logical_partitioning(init, ("embed", "mlp"))
                x = nn.Dense(F, kernel_init=init)(x)
            elif kind == "conv":
                x = nn.Conv(F, (option,), padding="SAME")(x)
            elif kind == "bn":
                x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(x)
            elif kind == "attn":
                attn = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=F, decode=True)
                x = attn(x)
            elif kind == "sow":
                self.sow("intermediates", f"h{i}", x)
            else:  # a variable of a random collection, maybe boxed
                col, boxed = option
                v = self.variable(col, f"v{i}", _boxed_ramp if boxed else _ramp)
                x = x + nn.unbox(v.value)[None, None]
        return x


linen_layers = st.one_of(
    st.tuples(st.just("dense"), st.sampled_from([None, "partitioned", "logical"])),
    st.tuples(st.just("conv"), st.sampled_from([1, 3])),
    st.tuples(st.just("bn"), st.none()),
    st.tuples(st.just("attn"), st.none()),
    st.tuples(st.just("sow"), st.none()),
    st.tuples(st.just("var"), st.tuples(st.sampled_from(COLLECTIONS), st.booleans())),
)


@SETTINGS
@given(
    specs=st.lists(linen_layers, min_size=1, max_size=5).map(tuple),
    sow_at_init=st.booleans(),
    train=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_linen_to_pytreemod_to_linen(
    specs: tuple[tuple[str, Any], ...], sow_at_init: bool, train: bool, seed: int
) -> None:
    stack = LinenStack(specs)
    key_init, key_x = jax.random.split(jax.random.key(seed))
    seq = jax.random.normal(key_x, (2, 3, F))
    mutable: Any = True if sow_at_init else nn.DenyList("intermediates")
    variables = stack.init(key_init, seq, train=False, mutable=mutable)

    model = bridge.from_linen(stack, variables)
    module, back = model.to_linen()
    assert module is stack
    assert _same(back, variables, exact=True)
    assert _boxes(back) == _boxes(variables)
    assert sorted(pm.to_variables(model)) == sorted(variables)

    # One stateful step (a decoded token) on each side.
    token = seq[:, :1]
    expected, updates = stack.apply(variables, token, train=train, mutable=list(variables))
    out, new_model = pm.apply(model, token, train, mutable=True)
    assert _same(out, expected)
    merged = {**variables, **updates}
    _, new_back = new_model.to_linen()
    assert _same(new_back, merged)
    assert _boxes(new_back) == _boxes(merged)
    if "cache" in variables:
        assert int(new_back["cache"]["MultiHeadDotProductAttention_0"]["cache_index"]) == 1


# ------------------------------------------------------------------ pytreemod -> Linen


class Lora(pm.Param, collection="lora"):
    pass


class PmStack(pm.Module):
    layers: list[Any]
    extras: dict[str, pm.Variable[Any]]

    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        for layer in self.layers:
            if isinstance(layer, pm.nn.BatchNorm):
                x = layer(x, use_running_average=not train)
            else:
                x = layer(x)
        for var in self.extras.values():
            x = x + pm.unbox(var.get())[None]
            if isinstance(var, pm.Cache):
                var.set(jax.tree.map(lambda v: v + 1.0, var.get()))
            elif isinstance(var, pm.Intermediate):
                total = x.sum(0)
                var.set(jax.tree.map(lambda v, t=total: v + t, var.get()))
        return x


EXTRA_TYPES = (pm.Param, pm.BatchStat, pm.Cache, pm.Intermediate, Lora)


def _build_pm(
    specs: tuple[tuple[str, Any], ...], extras: Any, tie: bool, *, key: jax.Array
) -> PmStack:
    keys = iter(jax.random.split(key, len(specs) + len(extras)))
    layers: list[Any] = []
    for kind, option in specs:
        if kind == "linear":
            init = jax.nn.initializers.lecun_normal()
            if option:
                init = pm.with_partitioning(init, ("embed", "mlp"))
            layers.append(pm.nn.Linear(F, F, kernel_init=init, key=next(keys)))
        else:
            layers.append(pm.nn.BatchNorm(F, momentum=0.8))
    table: dict[str, pm.Variable[Any]] = {}
    for i, (vtype, boxed) in enumerate(extras):
        value: Any = jax.random.normal(next(keys), (F,))
        table[f"e{i}"] = vtype(pm.Partitioned(value, ("embed",)) if boxed else value)
    if tie and table:
        table["tied"] = table["e0"]  # one Variable in two places
    return PmStack(layers, table)


pm_layers = st.one_of(
    st.tuples(st.just("linear"), st.booleans()), st.tuples(st.just("bn"), st.none())
)
pm_extras = st.lists(st.tuples(st.sampled_from(EXTRA_TYPES), st.booleans()), max_size=3).map(tuple)


@SETTINGS
@given(
    specs=st.lists(pm_layers, min_size=1, max_size=4).map(tuple),
    extras=pm_extras,
    tie=st.booleans(),
    train=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_pytreemod_to_linen_to_pytreemod(
    specs: tuple[tuple[str, Any], ...], extras: Any, tie: bool, train: bool, seed: int
) -> None:
    model = _build_pm(specs, extras, tie, key=jax.random.key(seed))
    x = jax.random.normal(jax.random.key(seed + 1), (3, F))
    lin = bridge.ToLinen(model)
    variables = lin.init(jax.random.key(0), x, train=False, mutable=True)
    assert sorted(variables) == sorted(pm.to_variables(model))
    rebuilt = lin.rebuild(variables)
    assert rebuilt == model
    assert _boxes(rebuilt) == _boxes(model)
    if "tied" in model.extras:
        assert rebuilt.extras["tied"] is rebuilt.extras["e0"]

    expected, new_model = pm.apply(model, x, train, mutable=True)
    # through Linen's apply
    out, updates = lin.apply(variables, x, train, mutable=True)
    assert _same(out, expected)
    rebuilt_new = lin.rebuild({**variables, **updates})
    assert _same(rebuilt_new, new_model)
    if "tied" in model.extras:
        assert rebuilt_new.extras["tied"] is rebuilt_new.extras["e0"]
    # and back into pytreemod around the Linen module
    wrapped = bridge.from_linen(lin, variables)
    out2, new_wrapped = pm.apply(wrapped, x, train, mutable=True)
    assert _same(out2, expected)
    assert _same(lin.rebuild(new_wrapped.to_linen()[1]), new_model)
