"""Trace-time shape checks: error messages, zero cost after tracing, none at unflatten."""

from collections.abc import Callable
from typing import Annotated, Self

import jax
import jax.numpy as jnp
import jaxtyping
import pytest
from beartype.vale import Is
from jaxtyping import Float, PyTree

import pytreemod as pm
from pytreemod.nn import functional as F

Key = Callable[[], jax.Array]


def test_linear_mismatch_names_class_method_argument_dimension_and_shapes(getkey: Key) -> None:
    layer = pm.nn.Linear(3, 4, key=getkey())
    with pytest.raises(pm.ShapeError) as info:
        layer(jnp.ones((2, 5)))
    assert str(info.value) == (
        "Linear.__call__(x=f32[2, 5]): dimension 'in_features' does not agree: it is 3 in "
        "'kernel' (f32[3, 4], axis 0 of \"in_features out_features\") but 5 in 'x' (f32[2, 5], "
        'axis 1 of "*batch in_features") (checked in pytreemod.nn.functional.linear)'
        ". Fix: give the layer inputs of the shapes and dtypes its docstring shows, or build it "
        "with sizes that fit the data (e.g. Linear(in_features=x.shape[-1], ...))."
    )
    assert isinstance(info.value, TypeError)  # like jaxtyping's own TypeCheckError


def test_mismatch_under_jit_reports_traced_shapes(getkey: Key) -> None:
    layer = pm.nn.Linear(3, 4, key=getkey())
    with pytest.raises(pm.ShapeError, match=r"Linear.__call__\(x=f32\[7, 2, 5\]\).*axis 2"):
        pm.jit(lambda m, x: m(x))(layer, jnp.ones((7, 2, 5)))


def test_functional_op_outside_a_module() -> None:
    with pytest.raises(pm.ShapeError, match=r"^pytreemod.nn.functional.linear: dimension"):
        F.linear(jnp.ones((2, 5)), jnp.ones((3, 4)))
    with pytest.raises(
        pm.ShapeError,
        match=r"argument 'kernel' is f32\[3\] \(1 axis\) but its annotation "
        r'"in_features out_features" needs 2 axes',
    ):
        F.linear(jnp.ones((2, 3)), jnp.ones(3))
    with pytest.raises(
        pm.ShapeError, match=r"argument 'x' has dtype int32 \(i32\[2, 3\]\); Inexact expected"
    ):
        F.linear(jnp.ones((2, 3), jnp.int32), jnp.ones((3, 4)))


def test_layer_method_arguments_are_checked_with_the_same_messages(getkey: Key) -> None:
    attn = jax.eval_shape(lambda k: pm.nn.MultiHeadAttention(2, 8, key=k), getkey())
    with pytest.raises(pm.ShapeError) as info:
        jax.eval_shape(lambda m: m(jnp.ones((2, 5, 8)), jnp.ones((3, 4, 8))), attn)
    assert str(info.value) == (
        "MultiHeadAttention.__call__(inputs_q=f32[2, 5, 8], inputs_k=f32[3, 4, 8]): dimension "
        "'batch' does not agree: it is (3,) in 'inputs_k' (f32[3, 4, 8], axis 0 of \"*batch "
        "kv_len kv_features\") but (2,) in 'inputs_q' (f32[2, 5, 8], axis 0 of \"*batch q_len "
        'q_features")'
        ". Fix: give the layer inputs of the shapes and dtypes its docstring shows, or build it "
        "with sizes that fit the data (e.g. Linear(in_features=x.shape[-1], ...))."
    )
    with pytest.raises(
        pm.ShapeError,
        match=r"^Linear.__call__\(x=i32\[2, 3\]\): argument 'x' has "
        r"dtype int32 \(i32\[2, 3\]\); Float expected\. "
        r"Fix: cast it \(x\.astype\(jnp\.float32\)\)\.$",
    ):
        pm.nn.Linear(3, 4, key=getkey())(jnp.ones((2, 3), jnp.int32))
    with pytest.raises(
        pm.ShapeError,
        match=r"LayerNorm.__call__\(x=f32\[\]\): argument 'x' "
        r'is f32\[\] \(0 axes\) but its annotation "\*batch features" needs at '
        r"least 1 axis",
    ):
        pm.nn.LayerNorm(3)(jnp.ones(()))


def test_attention_key_value_lengths_must_agree() -> None:
    q = jnp.ones((2, 5, 4, 8))
    with pytest.raises(
        pm.ShapeError,
        match=r"dimension 'kv_len' does not agree: it is 6 in 'value' \(f32\[2, 6, 4, 8\], "
        r"axis 1 .*but 7 in 'key'",
    ):
        F.dot_product_attention(q, jnp.ones((2, 7, 4, 8)), jnp.ones((2, 6, 4, 8)))


def test_a_users_module_opts_in_with_one_line(getkey: Key) -> None:
    class Affine(pm.Module, typecheck=True):
        w: pm.Param[jax.Array]

        def __call__(self, x: Float[jax.Array, "*b n"]) -> Float[jax.Array, "*b m"]:
            return F.linear(x, self.w.value)

    model = Affine(pm.Param(jnp.ones((3, 2))))
    assert model(jnp.ones((4, 3))).shape == (4, 2)
    with pytest.raises(pm.ShapeError, match=r"^Affine.__call__\(x=f32\[4, 5\]\): dimension"):
        model(jnp.ones((4, 5)))
    # The method's own annotation, checked before the op: a ShapeError too.
    with pytest.raises(
        pm.ShapeError,
        match=r"^Affine.__call__\(x=i32\[4, 3\]\): argument 'x' has dtype int32 .*Float expected",
    ):
        model(jnp.ones((4, 3), jnp.int32))


class _Pair(pm.Module, typecheck=True):
    scale: pm.Param[jax.Array]

    def combine(
        this,  # pyright: ignore[reportSelfClsParameterName]
        a: Float[jax.Array, "n d"],
        b: Float[jax.Array, "n d"],
    ) -> jax.Array:
        return (a + b) * this.scale.value

    def widen(self, x: Float[jax.Array, " n"]) -> Float[jax.Array, "n 2"]:
        return jnp.stack([x, x, x], axis=-1)  # wrong on purpose: n x 3


def test_users_method_names_both_arguments_whatever_the_instance_is_called() -> None:
    pair = _Pair(pm.Param(jnp.ones(())))
    assert pair.combine(jnp.ones((2, 3)), jnp.ones((2, 3))).shape == (2, 3)
    with pytest.raises(
        pm.ShapeError,
        match=r"^_Pair.combine\(a=f32\[2, 3\], b=f32\[2, 4\]\): dimension 'd' does not "
        r"agree: it is 4 in 'b' .* but 3 in 'a'",
    ):
        pair.combine(jnp.ones((2, 3)), jnp.ones((2, 4)))


def test_users_method_wrong_output_shape_is_a_shape_error() -> None:
    pair = _Pair(pm.Param(jnp.ones(())))
    with pytest.raises(pm.ShapeError, match=r"^_Pair.widen\(x=f32\[3\]\): .*return"):
        pair.widen(jnp.ones(3))


class _Shapes(pm.Module, typecheck=True):
    """Annotations at the edges of the one-pass checker: an output tied to an input, a
    symbolic axis (read from the arguments) and a PyTree of arrays."""

    def crop(self, x: Float[jax.Array, " n"]) -> Float[jax.Array, " n"]:
        return x[1:]  # wrong on purpose: n - 1

    def grow(self, x: Float[jax.Array, " n"], wrong: bool) -> Float[jax.Array, " n+1"]:
        return x if wrong else jnp.concatenate([x, x[:1]])

    def total(self, xs: PyTree[Float[jax.Array, " n"]]) -> jax.Array:
        return sum(jnp.sum(x) for x in jax.tree.leaves(xs))  # type: ignore[return-value]


def test_an_output_dimension_is_tied_to_the_arguments() -> None:
    with pytest.raises(pm.ShapeError, match=r"^_Shapes.crop\(x=f32\[3\]\): .*return"):
        _Shapes().crop(jnp.ones(3))


def test_symbolic_axes_and_pytree_annotations_are_checked() -> None:
    shapes = _Shapes()
    assert shapes.grow(jnp.ones(3), wrong=False).shape == (4,)
    with pytest.raises(pm.ShapeError, match=r"^_Shapes.grow\(x=f32\[3\]\): .*return"):
        shapes.grow(jnp.ones(3), wrong=True)
    assert shapes.total({"a": jnp.ones(2), "b": jnp.ones(2)}).shape == ()
    with pytest.raises(pm.ShapeError, match=r"^_Shapes.total\("):
        shapes.total({"a": jnp.ones(2), "b": jnp.ones(3)})


def test_unresolvable_annotations_keep_jaxtypings_explanation() -> None:
    # One annotation names an alias local to a function, which typing.get_type_hints
    # cannot resolve when the error is explained; another argument fails its check. The
    # error is still a ShapeError naming the class and method, with jaxtyping's text.
    def make() -> type:
        Rows = Float[jax.Array, "n k"]

        class Local(pm.Module, typecheck=True):
            w: pm.Param[jax.Array]

            def __call__(
                self,
                x: "Rows",  # pyright: ignore[reportInvalidTypeForm]
                scale: Float[jax.Array, " k"],
            ) -> jax.Array:
                return (x @ self.w.value) * scale[0]

        return Local

    model = make()(pm.Param(jnp.ones((3, 2))))
    assert model(jnp.ones((4, 3)), jnp.ones(3)).shape == (4, 2)
    with pytest.raises(pm.ShapeError, match=r"^Local.__call__\(x=f32\[4, 3\], scale=i32\[3\]\): "):
        model(jnp.ones((4, 3)), jnp.ones(3, jnp.int32))


def _step_jaxpr(model: object, x: object) -> str:
    def loss(m: object, v: jax.Array) -> jax.Array:
        return jnp.sum(m(v) ** 2)  # type: ignore[operator]

    return str(jax.make_jaxpr(jax.grad(loss))(model, x))


def test_jaxpr_is_identical_with_checks_on_and_off(getkey: Key) -> None:
    def build(*, key: jax.Array) -> pm.nn.Sequential:
        k1, k2, k3 = jax.random.split(key, 3)
        return pm.nn.Sequential(
            [
                pm.nn.Linear(8, 16, key=k1),
                pm.nn.LayerNorm(16),
                pm.nn.MultiHeadAttention(2, 16, key=k2),
                pm.nn.MLP(16, 32, 8, key=k3),
            ]
        )

    model = jax.eval_shape(lambda k: build(key=k), getkey())  # tracing needs no values
    x = jax.ShapeDtypeStruct((2, 5, 8), jnp.float32)
    on = _step_jaxpr(model, x)
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        off = _step_jaxpr(model, x)
    finally:
        jaxtyping.config.update("jaxtyping_disable", False)
    assert on == off


def test_jaxpr_is_identical_for_checked_and_unchecked_classes() -> None:
    def body(self: "Checked | Unchecked", x: jax.Array) -> jax.Array:
        return F.layer_norm(F.linear(x, self.w.value), jnp.ones(4), jnp.zeros(4))

    class Checked(pm.Module, typecheck=True):
        w: pm.Param[jax.Array]

        def __call__(self, x: Float[jax.Array, "*b n"]) -> Float[jax.Array, "*b m"]:
            return body(self, x)

    class Unchecked(pm.Module):
        w: pm.Param[jax.Array]

        def __call__(self, x: Float[jax.Array, "*b n"]) -> Float[jax.Array, "*b m"]:
            return body(self, x)

    w = pm.Param(jnp.ones((3, 4)))
    x = jnp.ones((2, 3))
    assert _step_jaxpr(Checked(w), x) == _step_jaxpr(Unchecked(w), x)


def test_checks_run_once_per_trace_not_per_step() -> None:
    seen: list[int] = []
    Counted = Annotated[jax.Array, Is[lambda x: seen.append(1) is None]]

    class Model(pm.Module, typecheck=True):
        w: pm.Param[jax.Array]

        def __call__(self, x: Counted) -> jax.Array:  # pyright: ignore[reportInvalidTypeForm]
            return x @ self.w.value

    model = Model(pm.Param(jnp.ones((3, 3))))
    step = pm.jit(lambda m, x: m(x))
    step(model, jnp.ones(3))
    traced = len(seen)
    assert traced > 0  # checked while tracing (jaxtyping checks arguments, then output)
    for _ in range(4):
        step(model, jnp.ones(3))
    assert len(seen) == traced  # the compiled step does not check


def test_no_checks_or_init_when_jax_rebuilds_a_layer(getkey: Key) -> None:
    calls: list[str] = []

    class Tracked(pm.nn.Linear):
        def __check_init__(self) -> None:
            calls.append("check")

    # pyright synthesises a dataclass __init__ for a subclass without one (the inherited
    # custom __init__ is what runs): reported as a core typing issue.
    layer = Tracked(3, 4, key=getkey())  # pyright: ignore[reportCallIssue]
    assert calls == ["check"]
    _, treedef = jax.tree.flatten(layer)
    rebuilt = jax.tree.unflatten(treedef, ["not", "arrays"])  # placeholders are fine
    assert rebuilt.kernel.value == "not"
    step = pm.jit(lambda m, x: (m, m(x)))
    for _ in range(3):
        layer, _ = step(layer, jnp.ones(3))
    assert calls == ["check"]  # rebuilt every step, constructed once


class _Counter(pm.Module, typecheck=True):
    n: pm.Param[jax.Array]

    def bump(self, by: Float[jax.Array, ""]) -> Self:
        return pm.replace(self, n=pm.Param(self.n.value + by))

    def merged(self, other: Self) -> tuple[Self, Float[jax.Array, ""]]:
        return pm.replace(self, n=pm.Param(self.n.value + other.n.value)), other.n.value

    def broken(self) -> Self:
        return self.n  # type: ignore[return-value]  # wrong on purpose: a Param


class _NamedCounter(_Counter):
    name: str = pm.field(static=True, default="c")


def test_methods_annotated_with_self_are_checked_against_their_class() -> None:
    c = _Counter(pm.Param(jnp.zeros(())))
    assert float(c.bump(jnp.ones(())).n.value) == 1.0
    total, other = c.bump(jnp.ones(())).merged(_Counter(pm.Param(jnp.full((), 2.0))))
    assert float(total.n.value) == 3.0 and float(other) == 2.0
    # Inherited by a subclass: its instances are instances of the declaring class.
    named = _NamedCounter(pm.Param(jnp.zeros(())))
    assert type(named.bump(jnp.ones(()))) is _NamedCounter
    with pytest.raises(
        pm.ShapeError,
        match=r"^_Counter.merged\(other=Param\(f32\[\]\)\): argument 'other' is "
        r"Param\(f32\[\]\) \(a Param\), but its annotation is _Counter\. Fix: ",
    ):
        c.merged(pm.Param(jnp.zeros(())))  # type: ignore[arg-type]
    with pytest.raises(pm.ShapeError, match=r"(?s)^_Counter.broken\(\): .*return"):
        c.broken()


def test_a_layers_checked_self_method_binds_its_declaring_class() -> None:
    # A layer's own @checked method (not wrapped by typecheck=True): first called on a
    # subclass instance, it must still accept instances of the class that declares it.
    from pytreemod._shapecheck import checked

    class Base(pm.Module):
        n: pm.Param[jax.Array]

        @checked
        def same(self) -> Self:
            return self

    class Sub(Base):
        pass

    sub, base = Sub(pm.Param(jnp.zeros(()))), Base(pm.Param(jnp.zeros(())))
    assert sub.same() is sub
    assert base.same() is base
