"""Module: dataclass fields, static fields, immutability, init checks, bound methods, JAX."""

import abc
import copy
import dataclasses
import inspect
import pickle
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import pytest

import pytreemod as pm
from tests.helpers import tree_allclose


class Linear(pm.Module):
    weight: pm.Param
    bias: pm.Param

    def __init__(self, n_in: int, n_out: int, *, key: jax.Array):
        self.weight = pm.Param(jax.random.normal(key, (n_in, n_out), dtype=jnp.float32))
        self.bias = pm.Param(jnp.zeros(n_out, dtype=jnp.float32))

    def __call__(self, x: jax.Array) -> jax.Array:
        return x @ self.weight.value + self.bias.value

    def encode(self, x: jax.Array) -> jax.Array:
        return jnp.tanh(self(x))


class Scaled(pm.Module):
    weight: jax.Array
    size: int = pm.field(static=True, default=3)
    scale: float = 1.0


class MLP(pm.Module):
    layers: list[Linear]
    activation: Callable[[jax.Array], jax.Array] = pm.field(static=True, default=jax.nn.relu)

    def __call__(self, x: jax.Array) -> jax.Array:
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.layers[-1](x)


def _mlp(getkey: Callable[[], jax.Array]) -> MLP:
    return MLP([Linear(2, 4, key=getkey()), Linear(4, 3, key=getkey())])


# --- construction -----------------------------------------------------------------------


def test_dataclass_generated_init() -> None:
    w = jnp.ones(2, dtype=jnp.float32)
    m = Scaled(w)
    assert m.weight is w
    assert m.size == 3
    assert m.scale == 1.0
    m2 = Scaled(w, 5, scale=2.0)
    assert (m2.size, m2.scale) == (5, 2.0)
    with pytest.raises(TypeError):
        Scaled()  # pyright: ignore[reportCallIssue]


def test_custom_init(getkey: Callable[[], jax.Array]) -> None:
    m = Linear(2, 3, key=getkey())
    assert isinstance(m.weight, pm.Param)
    assert m.weight.shape == (2, 3)
    assert m.bias.dtype == jnp.float32
    assert m(jnp.ones(2, dtype=jnp.float32)).shape == (3,)


def test_custom_init_fills_defaults_and_default_factory() -> None:
    class WithDefaults(pm.Module):
        a: int
        b: int = 7
        c: list[int] = dataclasses.field(default_factory=lambda: [1, 2])

        def __init__(self, a: int):
            self.a = a

    m = WithDefaults(1)
    assert (m.a, m.b, m.c) == (1, 7, [1, 2])
    assert WithDefaults(1).c is not WithDefaults(1).c


def test_nested_module_construction_inside_init(getkey: Callable[[], jax.Array]) -> None:
    class Outer(pm.Module):
        inner: Linear
        extra: pm.Param

        def __init__(self, key: jax.Array):
            k1, k2 = jax.random.split(key)
            self.inner = Linear(2, 2, key=k1)
            self.extra = pm.Param(jax.random.normal(k2, (2,), dtype=jnp.float32))

    m = Outer(getkey())
    assert isinstance(m.inner, Linear)
    with pytest.raises(pm.FrozenModuleError):
        m.inner.bias = pm.Param(jnp.ones(2, dtype=jnp.float32))


# --- static fields ----------------------------------------------------------------------


def test_static_field_lives_in_treedef() -> None:
    w = jnp.ones(2, dtype=jnp.float32)
    a, b, c = Scaled(w, size=3), Scaled(w, size=4), Scaled(w * 2, size=3)
    assert jtu.tree_structure(a) != jtu.tree_structure(b)
    assert jtu.tree_structure(a) == jtu.tree_structure(c)
    leaves = jtu.tree_leaves(a)
    # weight and the (non-static) Python float are leaves; the static size is not.
    assert len(leaves) == 2
    assert leaves[0] is w
    assert leaves[1] == 1.0
    rebuilt = jtu.tree_unflatten(jtu.tree_structure(b), leaves)
    assert rebuilt.size == 4


def test_static_field_metadata_is_recorded() -> None:
    by_name = {f.name: f for f in pm.fields(Scaled)}
    assert by_name["size"].metadata["static"] is True
    assert by_name["scale"].metadata.get("static", False) is False


def test_field_passes_metadata_through() -> None:
    class Tagged(pm.Module):
        x: int = pm.field(default=0, metadata={"unit": "m"})

    (f,) = pm.fields(Tagged)
    assert f.metadata["unit"] == "m"
    assert f.metadata["static"] is False


def test_static_field_with_unhashable_value_raises() -> None:
    class Config(pm.Module):
        sizes: Any = pm.field(static=True)

    with pytest.raises(pm.InvalidFieldError, match=r"Config\.sizes is a static field.*list"):
        Config([1, 2])
    assert Config((1, 2)).sizes == (1, 2)


@pytest.mark.parametrize(
    ("value", "held"),
    [
        (jnp.ones(2, dtype=jnp.float32), r"an array f32\[2\]"),
        (np.ones(2, dtype=np.float32), r"an array f32\[2\]\(numpy\)"),
        (pm.Param(jnp.ones(2, dtype=jnp.float32)), r"a Param \(collection 'params'\)"),
        (pm.BatchStat(0.5), r"a BatchStat \(collection 'batch_stats'\)"),
    ],
)
def test_static_field_holding_an_array_or_variable_is_an_error(value: Any, held: str) -> None:
    class Holder(pm.Module):
        value: Any = pm.field(static=True)

    with pytest.raises(pm.InvalidFieldError, match=rf"Holder\.value is a static field.*{held}"):
        Holder(value)
    # The message names the fix.
    with pytest.raises(pm.InvalidFieldError, match=r"Declare `value` as a regular field"):
        Holder(value)


def test_static_error_names_the_place_inside_the_field() -> None:
    class Holder(pm.Module):
        value: Any = pm.field(static=True)

    with pytest.raises(pm.InvalidFieldError, match=r"Holder\.value\[1\]\.w is a static"):
        Holder((1, {"w": pm.Param(jnp.zeros(3))}))
    # Hashable configuration is still fine.
    assert Holder((1, "relu")).value == (1, "relu")


def test_a_parameter_in_a_regular_field_is_partitioned() -> None:
    # The fix the error suggests: the same value in a regular field is a parameter.
    class Holder(pm.Module):
        value: Any

    _, params, _ = pm.partition(Holder(pm.Param(jnp.ones(2))), "params")
    assert params["value"].shape == (2,)


def test_static_numpy_scalar_warns_at_the_construction() -> None:
    class Holder(pm.Module):
        value: Any = pm.field(static=True)

    def build() -> Holder:
        return Holder(np.float32(0.5))

    with pytest.warns(
        pm.StaticArrayWarning, match=r"Holder\.value is a static field but holds"
    ) as record:
        build()
    (warning,) = record
    assert warning.filename == __file__
    assert warning.lineno == build.__code__.co_firstlineno + 1
    with pytest.warns(pm.PytreemodWarning, match="never traced or differentiated"):
        Holder((1, np.int32(3)))


def test_init_false_field_is_rejected_at_class_creation() -> None:
    with pytest.raises(pm.InvalidFieldError, match=r"Bad\.x is declared with init=False"):

        class Bad(pm.Module):
            x: int = dataclasses.field(init=False, default=1)


# --- immutability -----------------------------------------------------------------------


def test_assignment_after_init_raises(getkey: Callable[[], jax.Array]) -> None:
    m = Linear(2, 3, key=getkey())
    with pytest.raises(
        pm.FrozenModuleError, match=r"Cannot assign Linear\.weight.*replace\(weight=.*tree_at"
    ):
        m.weight = pm.Param(jnp.zeros((2, 3), dtype=jnp.float32))
    # Also for names that are not fields, and it is an AttributeError for hasattr & co.
    with pytest.raises(AttributeError, match=r"Cannot assign Linear\.other"):
        m.other = 1  # pyright: ignore[reportAttributeAccessIssue]
    assert m.weight.shape == (2, 3)


def test_delete_raises(getkey: Callable[[], jax.Array]) -> None:
    m = Linear(2, 3, key=getkey())
    with pytest.raises(pm.FrozenModuleError, match=r"Cannot delete Linear\.bias"):
        del m.bias
    assert m.bias.shape == (3,)


def test_undeclared_attribute_in_init_raises() -> None:
    class Sloppy(pm.Module):
        x: int

        def __init__(self, x: int):
            self.x = x
            self.y = 2  # pyright: ignore[reportAttributeAccessIssue]

    with pytest.raises(pm.UndeclaredFieldError, match=r"Sloppy\.__init__ sets 'y'.*Declare it"):
        Sloppy(1)


def test_forgotten_field_in_custom_init_raises() -> None:
    class Forgetful(pm.Module):
        x: int
        y: int

        def __init__(self, x: int):
            self.x = x

    with pytest.raises(
        pm.UninitializedFieldError, match=r"Forgetful\.__init__ returned without .*'y'"
    ):
        Forgetful(1)


def test_subclass_of_custom_init_class_gets_default_of_extra_field() -> None:
    class Base(pm.Module):
        x: int

        def __init__(self, x: int):
            self.x = x * 2

    class Child(Base):
        extra: int = 5

    c = Child(3)
    assert (c.x, c.extra) == (6, 5)
    assert [f.name for f in pm.fields(c)] == ["x", "extra"]


def test_subclass_of_custom_init_class_without_default_raises() -> None:
    class Base(pm.Module):
        x: int

        def __init__(self, x: int):
            self.x = x

    class Child(Base):
        extra: int

    with pytest.raises(pm.UninitializedFieldError, match="'extra'"):
        Child(3)  # pyright: ignore[reportCallIssue]


# --- converters and __check_init__ ------------------------------------------------------


def test_converter_runs_on_construction_but_not_on_unflatten() -> None:
    calls: list[str] = []

    def to_array(v: Any) -> Any:
        calls.append("convert")
        return jnp.asarray(v, dtype=jnp.float32)

    class Converted(pm.Module):
        x: Any = pm.field(converter=to_array)

        def __check_init__(self) -> None:
            calls.append("check")
            assert self.x.ndim == 0  # would fail on a placeholder

    m = Converted(1.0)  # pyright: ignore[reportCallIssue]
    assert isinstance(m.x, jax.Array)
    assert m.x.dtype == jnp.float32
    assert calls == ["convert", "check"]

    calls.clear()
    nones = jax.tree.map(lambda _: None, m)
    assert type(nones) is Converted
    assert nones.x is None
    sentinel = object()
    objs = jax.tree.map(lambda _: sentinel, m)
    assert objs.x is sentinel
    doubled = jax.jit(lambda m: jax.tree.map(lambda v: v * 2, m))(m)
    assert float(doubled.x) == 2.0
    replaced = m.replace(x="not converted")
    assert replaced.x == "not converted"
    assert calls == []


def test_converter_runs_after_custom_init() -> None:
    class Converted(pm.Module):
        x: Any = pm.field(converter=tuple)

        def __init__(self, n: int):
            self.x = list(range(n))

    assert Converted(3).x == (0, 1, 2)


def test_check_init_runs_for_every_class_in_mro_base_first() -> None:
    order: list[str] = []

    class Base(pm.Module):
        x: int

        def __check_init__(self) -> None:
            order.append("base")
            if self.x < 0:
                raise ValueError("x must be non-negative")

    class Middle(Base):
        pass

    class Child(Middle):
        y: int = 0

        def __check_init__(self) -> None:
            order.append("child")

    Child(1)
    assert order == ["base", "child"]
    with pytest.raises(ValueError, match="non-negative"):
        Child(-1)


def test_unflatten_does_not_run_init(getkey: Callable[[], jax.Array]) -> None:
    inits: list[int] = []

    class Counting(pm.Module):
        w: jax.Array

        def __init__(self, w: jax.Array):
            inits.append(1)
            self.w = w

    m = Counting(jnp.ones(2, dtype=jnp.float32))
    leaves, treedef = jtu.tree_flatten(m)
    rebuilt = jtu.tree_unflatten(treedef, leaves)
    assert type(rebuilt) is Counting
    assert rebuilt == m
    jax.vmap(lambda m: m.w.sum())(jax.tree.map(lambda x: jnp.stack([x, x]), m))
    assert jax.tree.map(lambda _: None, m).w is None
    assert type(jax.tree.map(lambda _: object(), m)) is Counting
    assert inits == [1]
    # An __init__ whose signature is unrelated to the fields is never called by JAX either.
    linear = Linear(2, 3, key=getkey())
    placeholders = jax.tree.map(lambda _: None, linear)
    assert type(placeholders) is Linear
    assert placeholders.weight.value is None


# --- bound methods ----------------------------------------------------------------------


def test_bound_method_is_a_pytree_of_the_model(getkey: Callable[[], jax.Array]) -> None:
    m = Linear(2, 3, key=getkey())
    method = m.encode
    assert isinstance(method, pm.BoundMethod)
    assert method.__self__ is m
    assert method.__name__ == "encode"
    leaves = jax.tree.leaves(method)
    assert len(leaves) == 2
    assert leaves[0] is m.weight.value
    assert leaves[1] is m.bias.value
    x = jnp.ones(2, dtype=jnp.float32)
    assert tree_allclose(method(x), jnp.tanh(m(x)))
    # Accessed on the class, it is the plain function.
    assert Linear.encode(m, x).shape == (3,)


def test_bound_method_equality_hash_and_immutability(getkey: Callable[[], jax.Array]) -> None:
    m = Linear(2, 3, key=getkey())
    assert m.encode == m.encode
    assert hash(m.encode) == hash(m.encode)
    other = Linear(2, 3, key=getkey())
    assert m.encode != other.encode
    with pytest.raises(pm.FrozenModuleError, match="bound method"):
        m.encode.__self__ = other  # pyright: ignore[reportAttributeAccessIssue]


def test_jit_traces_bound_method_argument_as_input(getkey: Callable[[], jax.Array]) -> None:
    traces: list[int] = []

    def call(method: Callable[[jax.Array], jax.Array], x: jax.Array) -> jax.Array:
        traces.append(1)
        return method(x)

    jitted = jax.jit(call)
    m = Linear(2, 3, key=getkey())
    m2 = jax.tree.map(lambda w: w + 1.0, m)
    x = jnp.ones(2, dtype=jnp.float32)
    out1 = jitted(m.encode, x)
    out2 = jitted(m2.encode, x)
    assert len(traces) == 1  # the weights are inputs: no retrace
    assert not np.allclose(out1, out2)
    assert tree_allclose(out1, m.encode(x))
    assert tree_allclose(out2, m2.encode(x))


def test_grad_of_bound_method_gives_bound_method_of_grads(
    getkey: Callable[[], jax.Array],
) -> None:
    m = Linear(2, 3, key=getkey())
    x = jnp.ones(2, dtype=jnp.float32)
    g = jax.grad(lambda f: f(x).sum())(m.encode)
    assert isinstance(g, pm.BoundMethod)
    assert g.__func__ is Linear.encode
    assert isinstance(g.__self__, Linear)
    # d/db sum(tanh(x @ W + b)) = 1 - tanh(.)**2
    assert tree_allclose(g.__self__.bias.value, 1 - jnp.tanh(m(x)) ** 2)


def test_plain_jax_jit_of_bound_method_works(getkey: Callable[[], jax.Array]) -> None:
    m = Linear(2, 3, key=getkey())
    x = jnp.ones(2, dtype=jnp.float32)
    assert tree_allclose(jax.jit(m.encode)(x), m.encode(x))
    m2 = jax.tree.map(lambda w: w * 2.0, m)
    assert tree_allclose(jax.jit(m2.encode)(x), m2.encode(x))


class Pair(pm.Module):
    a: jax.Array
    b: jax.Array

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.a * x + self.b

    def __getitem__(self, i: int) -> jax.Array:
        return (self.a, self.b)[i]

    def __add__(self, other: "Pair") -> "Pair":
        return Pair(self.a + other.a, self.b + other.b)

    def __len__(self) -> int:
        return 2


def _pair() -> Pair:
    return Pair(jnp.array(2.0), jnp.array(1.0))


@pytest.mark.parametrize("name", ["__call__", "__getitem__", "__add__"])
def test_dunder_methods_read_from_an_instance_are_pytrees(name: str) -> None:
    m = _pair()
    method = getattr(m, name)
    assert isinstance(method, pm.BoundMethod)
    assert method.__self__ is m and method.__name__ == name
    leaves = jax.tree.leaves(method)
    assert len(leaves) == 2 and leaves[0] is m.a and leaves[1] is m.b


def test_call_dunder_under_jit_traces_the_model(getkey: Callable[[], jax.Array]) -> None:
    m = Linear(2, 3, key=getkey())
    assert [x is y for x, y in zip(jax.tree.leaves(m.__call__), jax.tree.leaves(m))] == [
        True,
        True,
    ]
    traces: list[int] = []

    def run(f: Callable[[jax.Array], jax.Array], x: jax.Array) -> jax.Array:
        traces.append(1)
        return f(x)

    x = jnp.ones(2, dtype=jnp.float32)
    jitted = jax.jit(run)
    m2 = jax.tree.map(lambda w: w + 1.0, m)
    assert tree_allclose(jitted(m.__call__, x), m(x))
    assert tree_allclose(jitted(m2.__call__, x), m2(x))
    assert len(traces) == 1  # the weights are inputs, not constants
    g = jax.grad(lambda f: f(x).sum())(m.__call__)
    assert isinstance(g, pm.BoundMethod) and isinstance(g.__self__, Linear)
    assert tree_allclose(g.__self__.bias.value, jnp.ones(3))


def test_dunders_still_work_through_python_syntax() -> None:
    m = _pair()
    assert float(m(jnp.array(3.0))) == 7.0
    assert float(m[1]) == 1.0
    assert float((m + m).a) == 4.0
    assert len(m) == 2
    # Protocol dunders Python calls implicitly stay plain bound methods.
    for name in ("__eq__", "__hash__", "__repr__", "__len__", "__setattr__"):
        assert not isinstance(getattr(m, name), pm.BoundMethod), name
    assert m == _pair() and repr(m) == "Pair(a=f32[], b=f32[])"


def test_inspect_signature_of_a_dataclass_module_shows_its_fields() -> None:
    sig = inspect.signature(Scaled)
    assert list(sig.parameters) == ["weight", "size", "scale"]
    assert sig.parameters["size"].default == 3
    assert "_pytreemod_unflatten" not in str(sig)


def test_inspect_signature_of_a_custom_init_module_shows_its_parameters() -> None:
    sig = inspect.signature(Linear)
    assert list(sig.parameters) == ["n_in", "n_out", "key"]
    assert sig.parameters["key"].kind is inspect.Parameter.KEYWORD_ONLY
    assert sig.parameters["n_in"].annotation is int


def test_inspect_signature_of_library_layers_and_subclasses() -> None:
    sig = inspect.signature(pm.nn.Linear)
    assert list(sig.parameters)[:2] == ["in_features", "out_features"]
    assert "key" in sig.parameters

    class Wider(Scaled):
        extra: int = 0

    assert list(inspect.signature(Wider).parameters) == ["weight", "size", "scale", "extra"]
    # An instance's signature is still its __call__'s.
    m = Linear(2, 3, key=jax.random.key(0))
    assert list(inspect.signature(m).parameters) == ["x"]
    assert list(inspect.signature(_pair()).parameters) == ["x"]


# --- JAX transforms ---------------------------------------------------------------------


def test_jit_over_module(getkey: Callable[[], jax.Array]) -> None:
    traces: list[int] = []

    def apply(model: MLP, x: jax.Array) -> jax.Array:
        traces.append(1)
        return model(x)

    jitted = jax.jit(apply)
    m = _mlp(getkey)
    x = jnp.arange(2, dtype=jnp.float32)
    assert tree_allclose(jitted(m, x), m(x))
    m2 = jax.tree.map(lambda w: w * 0.5, m)
    assert tree_allclose(jitted(m2, x), m2(x))
    assert len(traces) == 1
    m3 = m.replace(activation=jax.nn.tanh)  # static field: new trace
    assert tree_allclose(jitted(m3, x), m3(x))
    assert len(traces) == 2


def test_jit_returns_module(getkey: Callable[[], jax.Array]) -> None:
    m = _mlp(getkey)
    out = jax.jit(lambda m: jax.tree.map(lambda w: w + 1.0, m))(m)
    assert type(out) is MLP
    assert out.activation is jax.nn.relu
    assert tree_allclose(out.layers[0].bias.value, jnp.ones(4, dtype=jnp.float32))


def test_grad_returns_module_of_same_type(getkey: Callable[[], jax.Array]) -> None:
    m = Linear(3, 2, key=getkey())
    x = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)

    def loss(model: Linear) -> jax.Array:
        return jax.vmap(model)(x).sum()

    g = jax.grad(loss)(m)
    assert type(g) is Linear
    assert isinstance(g.weight, pm.Param)
    # d/dW sum(x @ W + b) = x.T @ ones; d/db = batch size.
    expected_w = x.T @ jnp.ones((2, 2), dtype=jnp.float32)
    assert tree_allclose(g.weight.value, expected_w)
    assert tree_allclose(g.bias.value, jnp.full((2,), 2.0, dtype=jnp.float32))


def test_grad_with_static_field_and_sgd_step(getkey: Callable[[], jax.Array]) -> None:
    m = _mlp(getkey)
    x = jnp.ones((4, 2), dtype=jnp.float32)

    def loss(model: MLP) -> jax.Array:
        return jnp.mean(jax.vmap(model)(x) ** 2)

    g = jax.grad(loss)(m)
    assert type(g) is MLP
    assert g.activation is jax.nn.relu
    new = jax.tree.map(lambda p, d: p - 0.1 * d, m, g)
    assert float(loss(new)) < float(loss(m))


def test_vmap_over_stacked_model(getkey: Callable[[], jax.Array]) -> None:
    m1, m2 = Linear(2, 3, key=getkey()), Linear(2, 3, key=getkey())
    stacked = jax.tree.map(lambda a, b: jnp.stack([a, b]), m1, m2)
    assert stacked.weight.shape == (2, 2, 3)
    x = jnp.ones(2, dtype=jnp.float32)
    out = jax.vmap(lambda m, x: m(x), in_axes=(0, None))(stacked, x)
    assert tree_allclose(out, jnp.stack([m1(x), m2(x)]))
    # Models can be produced by vmap too.
    keys = jax.random.split(getkey(), 3)
    ensemble = jax.vmap(lambda k: Linear(2, 3, key=k))(keys)
    assert type(ensemble) is Linear
    assert ensemble.weight.shape == (3, 2, 3)


def test_flatten_with_path_gives_keyed_paths(getkey: Callable[[], jax.Array]) -> None:
    m = _mlp(getkey)
    flat, _ = jtu.tree_flatten_with_path(m)
    paths = [p for p, _ in flat]
    assert paths[0] == (
        jtu.GetAttrKey("layers"),
        jtu.SequenceKey(0),
        jtu.GetAttrKey("weight"),
        jtu.GetAttrKey("value"),
    )
    assert [jtu.keystr(p) for p in paths] == [
        ".layers[0].weight.value",
        ".layers[0].bias.value",
        ".layers[1].weight.value",
        ".layers[1].bias.value",
    ]


# --- replace, equality, fields, abstract classes ----------------------------------------


def test_replace_method_and_function(getkey: Callable[[], jax.Array]) -> None:
    m = Linear(2, 3, key=getkey())
    new_bias = pm.Param(jnp.ones(3, dtype=jnp.float32))
    r1 = m.replace(bias=new_bias)
    r2 = pm.replace(m, bias=new_bias)
    for r in (r1, r2):
        assert type(r) is Linear
        assert r.bias is new_bias
        assert r.weight is m.weight
    assert tree_allclose(m.bias.value, jnp.zeros(3, dtype=jnp.float32))  # unchanged
    with pytest.raises(pm.FrozenModuleError):
        r1.bias = new_bias


def test_replace_unknown_field_raises(getkey: Callable[[], jax.Array]) -> None:
    m = Linear(2, 3, key=getkey())
    with pytest.raises(
        pm.UndeclaredFieldError, match=r"Linear has no field 'bais'; its fields are: weight, bias"
    ):
        m.replace(bais=1)
    with pytest.raises(pm.UndeclaredFieldError, match="no field 'z'"):
        pm.replace(m, z=1)


def test_equality(getkey: Callable[[], jax.Array]) -> None:
    w = jnp.arange(3, dtype=jnp.float32)
    assert Scaled(w) == Scaled(jnp.arange(3, dtype=jnp.float32))
    assert Scaled(w) != Scaled(w + 1)
    assert Scaled(w) != Scaled(w, size=4)  # static
    assert Scaled(w) != Scaled(w, scale=2.0)  # python leaf
    assert Scaled(w) != Scaled(w[:2])  # shape
    assert Scaled(w) != Scaled(w.astype(jnp.int32))  # dtype
    assert Scaled(w) != w
    nan = jnp.array([jnp.nan], dtype=jnp.float32)
    assert Scaled(nan) == Scaled(nan + 0)

    class Other(pm.Module):
        weight: jax.Array
        size: int = pm.field(static=True, default=3)
        scale: float = 1.0

    assert Scaled(w) != Other(w)


def test_hash_of_array_free_module() -> None:
    class Config(pm.Module):
        depth: int
        name: str = pm.field(static=True, default="x")

    assert hash(Config(2)) == hash(Config(2))
    assert len({Config(2), Config(2), Config(3)}) == 2


def test_hash_of_module_with_arrays_raises(getkey: Callable[[], jax.Array]) -> None:
    m = Linear(2, 3, key=getkey())
    with pytest.raises(
        pm.UnhashableModuleError,
        match=r"Linear is not hashable because it holds arrays.*pass the model as a traced",
    ):
        hash(m)
    with pytest.raises(TypeError):  # what Python code expects from an unhashable value
        _ = {m}
    with pytest.raises(pm.UnhashableModuleError, match=r"jax\.jit\(model\)"):
        jax.jit(m)(jnp.ones(2, dtype=jnp.float32))


def test_fields() -> None:
    assert [f.name for f in pm.fields(Scaled)] == ["weight", "size", "scale"]
    m = Scaled(jnp.ones(1, dtype=jnp.float32))
    assert [f.name for f in pm.fields(m)] == ["weight", "size", "scale"]
    assert all(isinstance(f, dataclasses.Field) for f in pm.fields(m))
    assert not any(f.name.startswith("_") for f in pm.fields(m))


def test_abstract_methods_prevent_instantiation() -> None:
    class Layer(pm.Module):
        @abc.abstractmethod
        def apply(self, x: jax.Array) -> jax.Array: ...

    class Identity(Layer):
        def apply(self, x: jax.Array) -> jax.Array:
            return x

    with pytest.raises(TypeError, match="abstract"):
        Layer()  # pyright: ignore[reportAbstractUsage]
    x = jnp.ones(2, dtype=jnp.float32)
    assert Identity().apply(x) is x


# --- copying and pickling ---------------------------------------------------------------


class Tied(pm.Module):
    a: pm.Param
    b: pm.Param
    inner: Linear


@pytest.mark.parametrize(
    "clone",
    [copy.copy, copy.deepcopy, lambda x: pickle.loads(pickle.dumps(x))],
    ids=["copy", "deepcopy", "pickle"],
)
def test_copy_deepcopy_pickle(clone: Callable[[Any], Any], getkey: Callable[[], jax.Array]) -> None:
    shared = pm.Param(jnp.arange(3, dtype=jnp.float32))
    m = Tied(shared, shared, Linear(2, 3, key=getkey()))
    new = clone(m)
    assert type(new) is Tied
    assert new == m
    assert new.a is new.b  # sharing survives the memo
    with pytest.raises(pm.FrozenModuleError):
        new.a = shared
    method = clone(m.inner.encode)
    assert isinstance(method, pm.BoundMethod)
    x = jnp.ones(2, dtype=jnp.float32)
    assert tree_allclose(method(x), m.inner.encode(x))


def test_treescope_repr_of_a_module_delegates_to_the_renderer() -> None:
    pytest.importorskip("treescope")
    seen: list[str | None] = []

    def renderer(value: Any, path: str | None = None) -> Any:
        from treescope import rendering_parts

        seen.append(path)
        return rendering_parts.text("x")

    rendering = _pair().__treescope_repr__("m", renderer)
    assert seen == ["m.a", "m.b"]
    assert rendering is not NotImplemented
