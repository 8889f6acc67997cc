"""Every ``adapters.core`` error is raised, with its message checked.

The last test fails when an error class is added to ``adapters/core/_errors.py`` without a
``pytest.raises(<Name>, match=...)`` somewhere under ``tests/adapters``.
"""

import inspect
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import pytreemod as pm
from adapters.core import Scope, _errors, _errors_linen, apply, bind, init, lazy_init, lift, nn
from adapters.core.errors import (
    ApplyScopeInvalidVariablesStructureError,
    ApplyScopeInvalidVariablesTypeError,
    BranchVariableMismatchError,
    CarryVariableInitError,
    InvalidFilterError,
    InvalidRngError,
    InvalidScopeError,
    LazyInitError,
    LiftError,
    ModifyScopeVariableError,
    ScopeCollectionNotFound,
    ScopeNameInUseError,
    ScopeParamNotFoundError,
    ScopeParamShapeError,
    ScopeVariableNotFoundError,
    UnliftedCollectionError,
    UnliftedRngError,
)


def dense(scope: Scope, x: jax.Array, features: int) -> jax.Array:
    return nn.dense(scope, x, features)


def model(scope: Scope, x: jax.Array) -> jax.Array:
    return scope.child(dense, "layer")(x, 3)


X = jnp.ones((2, 4))


def variables() -> dict:
    return init(model)(jax.random.key(0), X)[1]


# ----------------------------------------------------------------------------- variables


def test_param_not_found_names_param_and_scope() -> None:
    def other(scope: Scope, x: jax.Array) -> jax.Array:
        return scope.child(dense, "renamed")(x, 3)

    with pytest.raises(
        ScopeParamNotFoundError,
        match=r'Could not find parameter named "kernel" in scope "/renamed"',
    ):
        apply(other)(variables(), X)


def test_param_shape_mismatch_names_param_scope_and_shapes() -> None:
    with pytest.raises(ScopeParamShapeError, match=r'"kernel".*"/layer".*\(5, 3\).*\(4, 3\)'):
        apply(model)(variables(), jnp.ones((2, 5)))


def test_variable_not_found_names_collection() -> None:
    def f(scope: Scope) -> None:
        scope.variable("stats", "a", jnp.zeros, ())

    def g(scope: Scope) -> None:
        scope.variable("stats", "b", jnp.zeros, ())

    v = init(f)(jax.random.key(0))[1]
    with pytest.raises(
        ScopeVariableNotFoundError,
        match=r'No Variable named "b" for collection "stats" exists in "/"',
    ):
        apply(g)(v)
    with pytest.raises(ScopeVariableNotFoundError, match='"b" for collection "stats"'):
        apply(lambda s: s.variable("stats", "b"), mutable=True)(v)


def test_collection_not_found_for_bare_params() -> None:
    v = variables()
    with pytest.raises(ScopeCollectionNotFound, match=r'"kernel" from collection "params"'):
        apply(model)({"stats": {}}, X)
    assert v  # the full dict works
    apply(model)(v, X)


def test_modify_immutable_collection() -> None:
    def f(scope: Scope) -> None:
        v = scope.variable("stats", "n", jnp.zeros, ())
        v.value = v.value + 1

    v = init(f)(jax.random.key(0))[1]
    with pytest.raises(
        ModifyScopeVariableError,
        match=r'Cannot update variable "n" in "/" because collection "stats" is immutable',
    ):
        apply(f)(v)


def test_name_in_use() -> None:
    def f(scope: Scope) -> None:
        scope.child(dense, "a")(X, 2)
        scope.child(dense, "a")(X, 2)

    with pytest.raises(
        ScopeNameInUseError, match=r'Duplicate use of scope name: "a" in scope \'/\''
    ):
        init(f)(jax.random.key(0))

    def g(scope: Scope) -> None:
        scope.param("w", jax.nn.initializers.zeros, (1,))
        scope.param("w", jax.nn.initializers.zeros, (1,))

    with pytest.raises(ScopeNameInUseError, match='Duplicate use of scope name: "w"'):
        init(g)(jax.random.key(0))


def test_invalid_scope_after_apply() -> None:
    leaked: list[Scope] = []
    init(lambda s: leaked.append(s.push("c")))(jax.random.key(0))
    with pytest.raises(InvalidScopeError, match='"/c" is no longer valid'):
        leaked[0].param("w", jax.nn.initializers.zeros, (1,))
    with pytest.raises(InvalidScopeError, match="no longer valid"):
        leaked[0].make_rng("params")


def test_invalid_scope_after_lifted_transform() -> None:
    leaked: list[Scope] = []

    def body(scope: Scope) -> None:
        leaked.append(scope)

    init(lambda s: lift.fold_rngs(body)(s))(jax.random.key(0))
    with pytest.raises(InvalidScopeError, match=r"fold_rngs\(\)"):
        leaked[0].put_variable("params", "w", jnp.zeros(()))


# ----------------------------------------------------------------------------- rngs


def test_missing_rng_stream() -> None:
    def f(scope: Scope) -> jax.Array:
        return nn.dropout(scope, X, 0.5)

    with pytest.raises(InvalidRngError, match=r'^None needs PRNG for "dropout"'):
        apply(f)({})


def test_param_without_params_rng() -> None:
    with pytest.raises(InvalidRngError, match='"params"'):
        apply(model, mutable=True)({}, X)


def test_invalid_rng_arguments() -> None:
    with pytest.raises(ValueError, match="First argument passed to an init function"):
        init(model)(3, X)
    with pytest.raises(ValueError, match="``rngs`` argument passed to an apply function"):
        apply(model)(variables(), X, rngs={"params": 3})
    with pytest.raises(InvalidRngError, match="rngs should be a dictionary mapping strings"):
        bind({}, rngs=[jax.random.key(0)])  # type: ignore[arg-type]


def test_unlifted_rng_stream() -> None:
    def body(scope: Scope, x: jax.Array) -> jax.Array:
        return nn.dropout(scope, x, 0.5)

    def f(scope: Scope, x: jax.Array) -> jax.Array:
        return lift.vmap(body, variable_axes={}, split_rngs={"params": True})(scope, x)

    rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1)}
    with pytest.raises(
        UnliftedRngError,
        match=r'needs PRNG for "dropout". The rng stream "dropout" is not lifted into .*"vmap"',
    ):
        apply(f)({}, X, rngs=rngs)


# ----------------------------------------------------------------------------- lifting


def test_unlifted_collection() -> None:
    def body(scope: Scope, x: jax.Array) -> jax.Array:
        return nn.batch_norm(scope, x, use_running_average=True)

    def f(scope: Scope, x: jax.Array) -> jax.Array:
        return lift.vmap(body, variable_axes={"params": 0}, split_rngs={"params": True})(scope, x)

    with pytest.raises(UnliftedCollectionError, match=r'"batch_stats".*not lifted.*"vmap"'):
        init(f)(jax.random.key(0), X)

    # A write to an unlifted collection says so too.
    def g(scope: Scope) -> None:
        scope.put_variable("stats", "n", jnp.zeros(()))

    with pytest.raises(ModifyScopeVariableError, match='not lifted into the transform "remat"'):
        init(lambda s: lift.remat(g, variables="params")(s))(jax.random.key(0))


def test_lift_errors() -> None:
    def body(scope: Scope, x: jax.Array, y: jax.Array) -> jax.Array:
        return x + y

    def f(scope: Scope) -> jax.Array:
        return lift.vmap(body, {}, {"params": True})(scope, jnp.ones(2), jnp.ones(3))

    with pytest.raises(LiftError, match=r"inconsistent mapped axis sizes \[2, 3\]"):
        init(f)(jax.random.key(0))

    def g(scope: Scope) -> jax.Array:
        return lift.vmap(body, {}, {"params": True}, in_axes=None)(scope, X, X)

    with pytest.raises(LiftError, match=r"axis_size=\.\.\."):
        init(g)(jax.random.key(0))
    with pytest.raises(LiftError, match="in_axes has 1 entries but 2 positional"):
        init(lambda s: lift.vmap(body, {}, {}, in_axes=(0,))(s, X, X))(jax.random.key(0))
    with pytest.raises(LiftError, match="must be int axes"):
        lift.scan(body, variable_axes={"params": None})
    with pytest.raises(LiftError, match="broadcast outputs"):
        lift.scan(body, out_axes=(0, lift.broadcast))
    with pytest.raises(LiftError, match="concrete=True"):
        lift.remat(body, concrete=True)
    with pytest.raises(LiftError, match="expected a Scope"):
        lift.fold_rngs(body)("not a scope", X, X)
    with pytest.raises(
        LiftError,
        match=r"`xs` \(positional 1\) at \.a has 2, argument `xs` \(positional 1\) at \.b has 1",
    ):
        init(lambda s: lift.scan(lambda scope, c, xs: (c, c))(s, X, {"a": X, "b": X[:1]}))(
            jax.random.key(0)
        )
    with pytest.raises(LiftError, match="scan length cannot be inferred"):
        init(lambda s: lift.scan(lambda s, c: (c, c), in_axes=())(s, X))(jax.random.key(0))
    with pytest.raises(LiftError, match="at least one length"):
        lift.remat_scan(body, lengths=())
    with pytest.raises(LiftError, match="reduce_axes"):
        init(lambda s: lift.vjp(body, s, X, X, reduce_axes=("b",)))(jax.random.key(0))
    with pytest.raises(LiftError, match="reduce_axes"):
        init(lambda s: lift.value_and_grad(body, s, X, X, reduce_axes=("b",)))(jax.random.key(0))


def test_unmapped_output_variables() -> None:
    def body(scope: Scope) -> None:
        scope.put_variable("extra", "v", jnp.zeros(()))

    def wrapper(scope_fn, repack_fn, variable_groups, rng_groups):  # type: ignore[no-untyped-def]
        scope = scope_fn(variable_groups, rng_groups)
        body(scope)
        return None, repack_fn(scope)

    # Out filters narrower than the inner mutability: repack refuses to drop state.
    packed = lift.pack(wrapper, (True,), ("params",), (True,), name="custom")

    def f(scope: Scope) -> None:
        packed(scope)

    with pytest.raises(ModifyScopeVariableError, match='"extra" is immutable'):
        init(f)(jax.random.key(0))

    def leaky(scope_fn, repack_fn, variable_groups, rng_groups):  # type: ignore[no-untyped-def]
        scope = scope_fn(variable_groups, rng_groups)
        scope.mutable = pm.to_filter(True)  # simulate an inner scope that broke its filter
        scope._mutable_cache = {}
        body(scope)
        return None, repack_fn(scope)

    with pytest.raises(LiftError, match=r"\['extra'\].*match no output filter"):
        init(lambda s: lift.pack(leaky, (True,), ("params",), (True,), name="leaky")(s))(
            jax.random.key(0)
        )


def test_carry_variable_init_in_scan_and_while_loop() -> None:
    def body(scope: Scope, c: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        n = scope.variable("counter", "n", jnp.zeros, ())
        n.value = n.value + 1
        return c, x

    def f(scope: Scope) -> object:
        return lift.scan(body, variable_carry="counter")(scope, jnp.zeros(()), jnp.ones(3))

    with pytest.raises(
        CarryVariableInitError, match=r"scan at \"/scan\(\)\".*\['counter'\]\['n'\]"
    ):
        init(f)(jax.random.key(0))

    def wbody(scope: Scope, c: jax.Array) -> jax.Array:
        scope.variable("counter", "n", jnp.zeros, ())
        return c + 1

    def g(scope: Scope) -> jax.Array:
        return lift.while_loop(
            lambda s, c: c < 3, wbody, scope, jnp.zeros(()), carry_variables="counter"
        )

    with pytest.raises(CarryVariableInitError, match="while_loop body"):
        init(g)(jax.random.key(0))


def test_branches_must_create_the_same_variables() -> None:
    def a(scope: Scope, x: jax.Array) -> jax.Array:
        return scope.child(dense, "a")(x, 2)

    def b(scope: Scope, x: jax.Array) -> jax.Array:
        return scope.child(dense, "b")(x, 2)

    def f(scope: Scope, pred: jax.Array) -> jax.Array:
        return lift.cond(pred, a, b, scope, X)

    with pytest.raises(BranchVariableMismatchError, match=r"cond.*only in branch 1: .*'b'"):
        init(f)(jax.random.key(0), jnp.array(True))

    def g(scope: Scope, i: jax.Array) -> jax.Array:
        return lift.switch(i, [a, a, b], scope, X)

    with pytest.raises(BranchVariableMismatchError, match="branch 2 and branch 0"):
        init(g)(jax.random.key(0), jnp.array(1))


# ----------------------------------------------------------------------------- init/apply


def test_invalid_variables_type() -> None:
    with pytest.raises(
        ApplyScopeInvalidVariablesTypeError, match="should be a dictionary of collections"
    ):
        apply(model)(jnp.ones(3), X)
    with pytest.raises(
        ApplyScopeInvalidVariablesTypeError,
        match="Each collection should be a dictionary with string keys",
    ):
        apply(model)({"params": jnp.ones(3)}, X)
    with pytest.raises(
        ApplyScopeInvalidVariablesTypeError, match="first argument passed to an apply function"
    ):
        apply(model)({3: {}}, X)


def test_invalid_variables_structure() -> None:
    with pytest.raises(
        ApplyScopeInvalidVariablesStructureError, match=r"with an extra params layer"
    ):
        apply(model)({"params": variables()}, X)


def test_lazy_init_dependency() -> None:
    def f(scope: Scope, x: jax.Array) -> None:
        scope.param("w", lambda key: x.sum(0))

    with pytest.raises(LazyInitError, match=r"Lazy init encountered a value .*\['params'\]\['w'\]"):
        lazy_init(f)(jax.random.key(0), jax.ShapeDtypeStruct((2, 3), jnp.float32))


def test_invalid_filter() -> None:
    with pytest.raises(InvalidFilterError, match=re.escape("Invalid Filter: \"{'params': True}\"")):
        apply(model, mutable={"params": True})({}, X)
    with pytest.raises(InvalidFilterError, match='Invalid Filter: "PathContains'):
        apply(model, mutable=pm.PathContains("kernel"))(variables(), X)


# ----------------------------------------------------------------------------- coverage


def _error_classes() -> list[type]:
    return [
        obj
        for mod in (_errors, _errors_linen)
        for _, obj in inspect.getmembers(mod, inspect.isclass)
        if obj.__module__ == mod.__name__
    ]


def test_every_error_is_documented_and_every_raised_one_tested() -> None:
    root = Path(__file__).parents[3]
    library = "\n".join(p.read_text() for p in (root / "adapters").rglob("*.py"))
    tests = "\n".join(p.read_text() for p in (root / "tests" / "adapters").rglob("test_*.py"))
    for cls in _error_classes():
        assert cls.__doc__, f"{cls.__name__} needs a docstring"
        assert issubclass(cls, _errors.FlaxError) and issubclass(cls, pm.PytreemodError)
        if re.search(rf"raise (errors\.)?{cls.__name__}\(", library):
            pattern = rf"pytest\.raises\(\s*(errors\.)?{cls.__name__}\b"
            assert re.search(pattern, tests), f"no test raises {cls.__name__}"
