# The sweep passes wrong types on purpose.
# pyright: reportArgumentType=false, reportCallIssue=false, reportAttributeAccessIssue=false
"""Bad-input sweep, ``pytreemod`` transforms and functions: wrong types, shapes and
names are a pytreemod error (or a ``TypeError``/``ValueError`` at the API boundary) that
names the argument or path and says what to pass; never a raw ``IndexError``/
``AttributeError`` from inside the library or a silently wrong result.

A case marked ``xfail(strict=True)`` would be a sharp edge of the core still open,
stating the error it should raise (fixing it makes the xfail fail: then remove the mark).
"""

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import pytreemod as pm

KEY = jax.random.key(0)
LIN = pm.nn.Linear(3, 4, key=KEY)
X = jnp.ones((2, 3))


def _structure() -> Any:
    return pm.partition(LIN, "params")[0]


def _params() -> Any:
    return pm.partition(LIN, "params")[1]


class _WithStaticParam(pm.Module):
    w: Any = pm.field(static=True)


# (id, call, error class, regex on the message)
CASES: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    # jit / vmap / scan / grad
    ("jit-shape", lambda: pm.jit(LIN)(jnp.ones((2, 5))), pm.ShapeError, r"'in_features' does"),
    (
        "vmap-in-axes-str",
        lambda: pm.vmap(lambda x: x, in_axes="x")(jnp.ones(3)),
        pm.TransformError,
        r"vmap in_axes: the spec 'x' does not fit the tree at args\[0\]",
    ),
    (
        "scan-length",
        lambda: pm.scan(lambda c, x: (c, x), length=3)(jnp.zeros(()), jnp.ones(5)),
        pm.TransformError,
        r"length=3 but argument `x` \(positional 1\) has 5 along the scanned axis",
    ),
    (
        "scan-xs-lengths",
        lambda: pm.scan(lambda c, x, y: (c, x + y), in_axes=(pm.Carry, 0, 0))(
            jnp.zeros(()), jnp.ones(5), jnp.ones(4)
        ),
        pm.TransformError,
        r"argument `x` \(positional 1\) has 5, argument `y` \(positional 2\) has 4",
    ),
    (
        "scan-out-axes",
        lambda: pm.scan(lambda c, x: c)(jnp.zeros(()), jnp.ones(5)),
        pm.TransformError,
        r"out_axes=\(Carry, 0\) must contain exactly one Carry",
    ),
    (
        "grad-argnums",
        lambda: pm.grad(lambda x: jnp.sum(x), argnums=3)(jnp.ones(2)),
        pm.TransformError,
        r"argnums refers to argument 3 but the function got 1 positional",
    ),
    # partition / combine / state / variables
    (
        "partition-filter",
        lambda: pm.partition(LIN, 3.5),
        pm.InvalidFilterError,
        r"3\.5 \(of type float\) is not a filter",
    ),
    ("state-filter", lambda: pm.state(LIN, object()), pm.InvalidFilterError, r"is not a filter"),
    (
        "combine-structure",
        lambda: pm.combine(3, {}),
        pm.StateMismatchError,
        r"expects the Structure returned by partition.*got int",
    ),
    (
        "combine-missing",
        lambda: pm.combine(_structure()),
        pm.StateMismatchError,
        r"No state has a value for \.kernel \(collection 'params'\)",
    ),
    (
        "combine-wrong-keys",
        lambda: pm.combine(_structure(), {"x": 1}),
        pm.StateMismatchError,
        r"No state has a value for \.kernel",
    ),
    (
        "combine-shape",
        lambda: pm.combine(_structure(), jax.tree.map(lambda a: jnp.ones(7), _params())),
        pm.StateMismatchError,
        r"\.kernel is float32\[7\], but the model has float32\[3, 4\] there",
    ),
    (
        "combine-list",
        lambda: pm.combine(_structure(), [1, 2]),
        pm.StateMismatchError,
        r"state 1 is a list, not a mapping",
    ),
    (
        "from-variables-missing",
        lambda: pm.from_variables(LIN, {"params": {"kernel": jnp.ones((3, 4))}}),
        pm.StateMismatchError,
        r"variables\['params'\] has no value for \.bias",
    ),
    (
        "from-variables-shape",
        lambda: pm.from_variables(
            LIN, {"params": {"kernel": jnp.ones((5, 4)), "bias": jnp.ones(4)}}
        ),
        pm.StateMismatchError,
        r"variables\['params'\]\.kernel is float32\[5, 4\], but the model has float32\[3, 4\]",
    ),
    # apply
    (
        "apply-lambda",
        lambda: pm.apply(lambda x: BN(x), jnp.ones((2, 4)), mutable="batch_stats"),
        pm.StateWriteError,
        r"was given a lambda.*pass the module itself",
    ),
    (
        "apply-mutable",
        lambda: pm.apply(BN, jnp.ones((2, 4)), mutable=3),
        pm.InvalidFilterError,
        r"3 \(of type int\) is not a filter",
    ),
    (
        "apply-immutable",
        lambda: pm.apply(BN, jnp.ones((2, 4))),
        pm.StateWriteError,
        r"Cannot update \.mean: collection 'batch_stats' is not mutable",
    ),
    (
        "apply-mutable-typo",
        lambda: pm.apply(BN, jnp.ones((2, 4)), mutable="batch_stat"),
        pm.InvalidFilterError,
        r"no variable has collection 'batch_stat' \(a typo\?\)",
    ),
    (
        "partition-typo",
        lambda: pm.partition(LIN, "parms"),
        pm.InvalidFilterError,
        r"no variable has collection 'parms' \(a typo\?\)\. The tree's collections are 'params'",
    ),
    (
        "state-typo",
        lambda: pm.state(LIN, "parms"),
        pm.InvalidFilterError,
        r"no variable has collection 'parms'",
    ),
    (
        "train-state-typo",
        lambda: pm.TrainState.create(LIN, _sgd(), wrt="parms"),
        pm.InvalidFilterError,
        r"no variable has collection 'parms'",
    ),
    # tree_at / replace / fields
    (
        "tree-at-both",
        lambda: pm.tree_at(lambda m: m.kernel, LIN, 1, replace_fn=lambda x: x),
        pm.TreeAtError,
        r"needs exactly one of `replace` or `replace_fn`",
    ),
    (
        "tree-at-neither",
        lambda: pm.tree_at(lambda m: m.kernel, LIN),
        pm.TreeAtError,
        r"needs exactly one of",
    ),
    (
        "tree-at-static",
        lambda: pm.tree_at(lambda m: m.in_features, LIN, 5),
        pm.TreeAtError,
        r"`where` returned int object that is not a node of the tree",
    ),
    (
        "replace-field",
        lambda: pm.replace(LIN, kernal=1),
        pm.UndeclaredFieldError,
        r"Linear has no field 'kernal'; its fields are: kernel, bias",
    ),
    (
        "static-param",
        lambda: _WithStaticParam(pm.Param(jnp.ones(2))),
        pm.InvalidFieldError,
        r"_WithStaticParam\.w is a static field .* holds a Param",
    ),
    # checkpoints
    (
        "load-missing",
        lambda: pm.load(os.devnull + "-no-such-file", LIN),
        pm.CheckpointError,
        r"no such checkpoint file",
    ),
]

BN = pm.nn.BatchNorm(4)


@pytest.mark.parametrize(
    ("call", "cls", "match"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_is_a_library_error(
    call: Callable[[], Any], cls: type[Exception], match: str
) -> None:
    with pytest.raises(cls, match=match):
        call()


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    path = tmp_path / "linear"
    pm.save(path, LIN)
    return path


def test_loading_into_a_model_that_does_not_fit(saved: Path) -> None:
    with pytest.raises(
        pm.CheckpointMismatchError,
        match=r"\.kernel: the file has float32\[3, 4\], the model has float32\[3, 5\]",
    ):
        pm.load(saved, pm.nn.Linear(3, 5, key=KEY))
    with pytest.raises(pm.CheckpointMismatchError, match=r"the model has bfloat16\[3, 4\]"):
        pm.load(saved, pm.nn.Linear(3, 4, param_dtype=jnp.bfloat16, key=KEY))
    with pytest.raises(
        pm.CheckpointMismatchError, match=r"entry 'kernel' has no place in the model"
    ):
        pm.load(saved, 3)


def test_errors_jax_raises_at_the_api_boundary_pass_through_unchanged() -> None:
    """These come from JAX's own argument checks, with messages that name the problem;
    pytreemod neither hides them nor turns them into a deeper failure."""
    with pytest.raises(TypeError, match=r"Gradient only defined for scalar-output functions"):
        pm.grad(lambda m, x: m(x))(LIN, X)
    with pytest.raises(TypeError, match=r"Gradient only defined for scalar-output"):
        pm.value_and_grad(lambda x: x)(jnp.ones(2))
    with pytest.raises(TypeError, match=r"grad requires real-valued outputs"):
        pm.grad(lambda x: x * 2)(3)
    with pytest.raises(TypeError, match=r"two-element tuple"):
        pm.grad(lambda x: jnp.sum(x), has_aux=True)(jnp.ones(2))
    with pytest.raises(TypeError, match=r"carry input and carry output must have equal types"):
        pm.scan(lambda c, x: (jnp.ones(2), x))(jnp.zeros(()), jnp.ones(5))
    with pytest.raises(TypeError, match=r"Pred must be a scalar"):
        pm.cond(jnp.ones(3) > 0, lambda x: x, lambda x: x, jnp.ones(2))
    with pytest.raises(TypeError, match=r"cond branches must have equal output types"):
        pm.cond(True, lambda x: x, lambda x: x[0], jnp.ones(2))
    with pytest.raises(ValueError, match=r"Empty branch sequence"):
        pm.switch(0, [], jnp.ones(2))
    with pytest.raises(TypeError, match=r"cond_fun must return a boolean scalar"):
        pm.while_loop(lambda c: c, lambda c: c + 1, jnp.ones(2))
    with pytest.raises(AttributeError, match=r"'Linear' object has no attribute 'kernal'"):
        pm.tree_at(lambda m: m.kernal, LIN, 1)
    with pytest.raises(TypeError, match=r"expected str, bytes or os\.PathLike object, not int"):
        pm.save(3, LIN)


# ---------------------------------------------- wrong function, argnums, shapes (core)

_NOT_CALLABLE = [
    ("jit", lambda: pm.jit(3)),
    ("filter_jit", lambda: pm.filter_jit(3)),
    ("jit", lambda: pm.jit(donate_argnums=0)(3)),
    ("vmap", lambda: pm.vmap(3)),
    ("scan", lambda: pm.scan(3)),
    ("grad", lambda: pm.grad(3)),
    ("value_and_grad", lambda: pm.value_and_grad(3)),
    ("remat", lambda: pm.remat(3)),
    ("eval_shape", lambda: pm.eval_shape(3, X)),
    ("apply", lambda: pm.apply(3, X)),
    ("with_partitioning", lambda: pm.with_partitioning(3, ("a",))),
]


@pytest.mark.parametrize(
    ("name", "call"), _NOT_CALLABLE, ids=[f"{c[0]}-{i}" for i, c in enumerate(_NOT_CALLABLE)]
)
def test_a_non_callable_function_is_a_type_error_naming_the_transform(
    name: str, call: Callable[[], Any]
) -> None:
    with pytest.raises(TypeError, match=rf"\b{name}\b.*got 3 of type int, which is not callable"):
        call()


@pytest.mark.parametrize("bad", ["x", (0, "1"), (True,), {0}, (pm.DonateState("a"),)])
def test_bad_donate_argnums_names_the_argument(bad: Any) -> None:
    with pytest.raises(TypeError, match=r"jit: donate_argnums must be an int, a DonateState"):
        pm.jit(lambda m: m, donate_argnums=bad)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda: pm.vmap(lambda a, b: a + b)(jnp.ones(3), jnp.ones(4)),
            r"sizes of the mapped axes do not agree: size 3: args\[0\]; size 4: args\[1\]\. "
            r".*give in_axes=None",
        ),
        (
            lambda: pm.vmap(lambda m, x: m(x))(LIN, X),
            r"size 3: args\[0\]\.kernel; size 4: args\[0\]\.bias; size 2: args\[1\]\."
            r".*in_axes=\(None, 0\) for a model",
        ),
        (
            lambda: pm.vmap(lambda a: a, axis_size=4)(jnp.ones(3)),
            r"mapped axes and axis_size=4 do not agree: size 3: args\[0\]",
        ),
        (
            lambda: pm.vmap(lambda x, y: x)(X, y=jnp.ones(5)),
            r"size 2: args\[0\]; size 5: kwargs\['y'\]",
        ),
        (
            lambda: pm.vmap(lambda x: x, in_axes=2)(jnp.ones(3)),
            r"args\[0\] is of shape \(3,\) \(rank 1\), which has no axis 2 to vmap over",
        ),
        (
            lambda: pm.vmap(lambda a: a)(jnp.ones(())),
            r"args\[0\] is a scalar, which has no axis 0 to vmap over; give it in_axes=None",
        ),
    ],
    ids=["sizes", "model-sizes", "axis-size", "kwargs", "axis-past-rank", "scalar"],
)
def test_vmap_shape_errors_name_the_argument_path(call: Callable[[], Any], match: str) -> None:
    with pytest.raises(pm.TransformError, match=match):
        call()


def test_vmap_shape_checks_accept_negative_and_broadcast_axes() -> None:
    out = pm.vmap(lambda a, b: a + b, in_axes=(-1, None))(jnp.ones((2, 3)), jnp.ones(()))
    assert out.shape == (3, 2)


def test_scanning_over_a_scalar_names_the_argument() -> None:
    with pytest.raises(
        pm.TransformError,
        match=r"scan: argument `x` \(positional 1\) is a scalar, which has no axis 0 to scan",
    ):
        pm.scan(lambda c, x: (c, x))(jnp.zeros(()), jnp.ones(()))


@pytest.mark.parametrize(
    ("call", "cls", "match"),
    [
        (
            lambda: pm.tree_at("kernel", LIN, 1),
            pm.TreeAtError,
            r"`where` must be a function selecting the node\(s\) to replace, e\.g\. "
            r"`lambda m: m\.kernel`, got 'kernel'",
        ),
        (
            lambda: pm.replace(3, a=1),
            TypeError,
            r"replace: expected a Module .*got int; for other trees use pm\.tree_at",
        ),
    ],
    ids=["tree-at-where", "replace-non-module"],
)
def test_tree_editing_with_a_wrong_argument_says_what_to_pass(
    call: Callable[[], Any], cls: type[Exception], match: str
) -> None:
    with pytest.raises(cls, match=match):
        call()


def test_train_state_with_a_non_optimizer_says_what_to_pass() -> None:
    with pytest.raises(
        TypeError, match=r"TrainState\.create: tx must be an optax GradientTransformation"
    ):
        pm.TrainState.create(LIN, 3)


def _sgd() -> Any:
    import optax

    return optax.sgd(0.1)
