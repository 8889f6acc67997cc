"""Type-check failures in pytreemod's words, and NumPy arrays where ``jax.Array`` is
annotated: a user's ``typecheck=True`` module and the ``pm.nn`` layers (issue 32, item 1)."""

# The tests pass wrong types on purpose.
# pyright: reportArgumentType=false

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, Float, Int

import pytreemod as pm

KEY = jax.random.key(0)


class CNN(pm.Module, typecheck=True):
    lin: pm.nn.Linear

    def __call__(self, x: Float[Array, "batch 8 8 1"]) -> Float[Array, "batch 3"]:
        assert isinstance(x, jax.Array)  # what the annotation promises, even from NumPy
        return self.lin(x.reshape(x.shape[0], -1))


class Wrong(pm.Module, typecheck=True):
    def __call__(self, x: Float[Array, "batch 4"]) -> Float[Array, "batch 3"]:
        return x

    def to_numpy(self, x: Float[Array, " n"]) -> Float[Array, " n"]:
        return np.asarray(x)  # type: ignore[return-value]

    def count(self, n: Int[Array, ""], scale: float) -> Float[Array, ""]:
        return n * scale


class Outer(pm.Module):
    cnn: CNN

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.cnn(x)


@pytest.fixture(scope="module")
def cnn() -> CNN:
    return CNN(pm.nn.Linear(64, 3, key=KEY))


def test_numpy_arrays_are_converted_where_jax_array_is_annotated(cnn: CNN) -> None:
    x = np.ones((5, 8, 8, 1), np.float32)
    assert cnn(x).shape == (5, 3)
    assert Outer(cnn)(x).shape == (5, 3)
    assert pm.jit(cnn)(x).shape == (5, 3)
    # Converted, then checked like any array: a wrong shape is still named.
    with pytest.raises(
        pm.ShapeError,
        match=r"^CNN\.__call__\(x=f32\[5, 8, 8, 2\]\): axis 3 of argument 'x' \(f32\[5, 8, 8, "
        r"2\]\) must be 1 \(annotation \"batch 8 8 1\"\) but is 2\. Fix: pass arrays that fit "
        r"the annotations of CNN\.__call__, or correct the annotations\.$",
    ):
        cnn(np.ones((5, 8, 8, 2), np.float32))


def test_a_wrong_return_value_names_the_return_value_and_the_fix() -> None:
    with pytest.raises(
        pm.ShapeError,
        match=r"^Wrong\.__call__\(x=f32\[2, 4\]\): axis 1 of the return value \(f32\[2, 4\]\) "
        r"must be 3 \(annotation \"batch 3\"\) but is 4\. Fix: return a value that fits the "
        r"annotation of Wrong\.__call__, or correct the annotation\.$",
    ):
        Wrong()(jnp.ones((2, 4)))
    with pytest.raises(
        pm.ShapeError,
        match=r"^Wrong\.to_numpy\(x=f32\[3\]\): the return value is a NumPy array, "
        r"f32\[3\]\(numpy\), but its annotation is Float\[Array, \"n\"\]\. Fix: return "
        r"jnp\.asarray\(\.\.\.\)",
    ):
        Wrong().to_numpy(jnp.ones(3))


def test_a_non_array_and_a_wrong_dtype_say_what_was_expected(cnn: CNN) -> None:
    with pytest.raises(
        pm.ShapeError,
        match=r"^CNN\.__call__\(x='hi'\): argument 'x' is 'hi' \(a str\), but its annotation "
        r"is Float\[Array, \"batch 8 8 1\"\]\. Fix: pass an array of that shape and dtype",
    ):
        cnn("hi")
    with pytest.raises(
        pm.ShapeError,
        match=r"^CNN\.__call__\(x=i32\[5, 8, 8, 1\]\): argument 'x' has dtype int32 .*Float "
        r"expected\. Fix: cast it \(x\.astype\(jnp\.float32\)\), or widen the annotation\.$",
    ):
        cnn(jnp.ones((5, 8, 8, 1), jnp.int32))
    with pytest.raises(
        pm.ShapeError,
        match=r"argument 'scale' is 'x' \(a str\), but its annotation is float\. Fix: pass a "
        r"value of the annotated type\.$",
    ):
        Wrong().count(jnp.asarray(2), "x")


def test_a_python_scalar_into_linear_and_the_path_in_a_model(cnn: CNN) -> None:
    with pytest.raises(
        pm.ShapeError,
        match=r"^Linear\.__call__\(x=1\.0\): argument 'x' is 1\.0 \(a float\), but its "
        r"annotation is Float\[Array \| np\.ndarray, \"\*batch in_features\"\]\. Fix: pass an "
        r"array of that shape and dtype, e\.g\. jnp\.asarray\(\.\.\.\)\.$",
    ):
        pm.nn.Linear(3, 4, key=KEY)(1.0)
    with pytest.raises(pm.ShapeError, match=r"^Outer\.cnn\(x=f32\[5, 8, 8, 2\]\): axis 3"):
        Outer(cnn)(np.ones((5, 8, 8, 2), np.float32))
    with pytest.raises(pm.ShapeError, match=r"^Outer\.cnn\(x=f32\[5, 8, 8, 2\]\): .*Fix: "):
        pm.jit(Outer(cnn))(np.ones((5, 8, 8, 2), np.float32))


def test_no_message_carries_jaxtypings_own_text(cnn: CNN) -> None:
    calls = [
        lambda: cnn("hi"),
        lambda: Wrong()(jnp.ones((2, 4))),
        lambda: pm.nn.Linear(3, 4, key=KEY)([1.0, 2.0, 3.0]),
        lambda: pm.nn.Linear(3, 4, key=KEY)(jnp.ones((2, 5))),
    ]
    for call in calls:
        with pytest.raises(pm.ShapeError) as info:
            call()
        text = str(info.value)
        assert "Fix: " in text
        assert "Type-check error" not in text and "jaxlib" not in text and "\n" not in text
