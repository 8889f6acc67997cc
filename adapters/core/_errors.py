"""Every exception ``adapters.core`` raises.

The classes carry the names of their ``flax.errors`` counterparts, so ``except`` clauses
written against Flax keep working after the import is changed. Each docstring states the
cause and the fix; every message names the scope path (``/encoder/dense_0``) and, where
one is involved, the collection. All derive from ``CoreError``, itself a
``pytreemod.PytreemodError``; the ones Flax raises as ``ValueError`` are ``ValueError`` too.
"""

from typing import Any

import pytreemod as pm

InvalidFilterError = pm.InvalidFilterError
"""A collection or rng filter that is not one of the filter forms (pytreemod's class)."""


class CoreError(pm.PytreemodError):
    """Base class of every ``adapters.core`` error; catch it to handle any of them."""


# ----------------------------------------------------------------------------- variables


class ScopeParamNotFoundError(CoreError):
    """``scope.param(name, ...)`` found no parameter and ``params`` is not mutable.

    Cause: ``apply`` runs with the ``params`` collection read-only, and the name asked for
    is not in it: the variables come from a different model, or the code names the
    parameter differently than it did at ``init``.

    Fix: pass the variables ``init`` returned for this function, and keep parameter names
    stable between ``init`` and ``apply``; to create parameters during ``apply``, pass
    ``mutable=['params']``.
    """

    def __init__(self, param_name: str, scope_path: str):
        super().__init__(
            f'Could not find parameter "{param_name}" (collection "params") in scope '
            f'"{scope_path}", and "params" is not mutable. Pass the variables init returned, '
            "or apply(..., mutable=['params']) to create it."
        )


class ScopeParamShapeError(CoreError):
    """An existing parameter's shape differs from what its initializer would produce.

    Cause: the inputs (or hyperparameters) given to ``apply`` differ from those given to
    ``init``, so the shape the layer asks for (``(x.shape[-1], features)``) no longer
    matches the stored parameter.

    Fix: call ``apply`` with inputs of the shape used at ``init``, or re-initialize.
    """

    def __init__(self, param_name: str, scope_path: str, value_shape: Any, init_shape: Any):
        super().__init__(
            f'For parameter "{param_name}" (collection "params") in scope "{scope_path}", '
            f"the initializer would produce shape {init_shape} but the existing parameter "
            f"has shape {value_shape}. Call apply with inputs shaped as at init, or "
            "re-initialize the variables."
        )


class ScopeVariableNotFoundError(CoreError):
    """``scope.variable(col, name)`` found no variable and cannot create it.

    Cause: the collection is not mutable (or no ``init_fn`` was given) and the variable
    does not exist in this scope.

    Fix: make the collection mutable (``apply(..., mutable=[col])``) and pass an
    ``init_fn``, or pass variables that contain it.
    """

    def __init__(self, name: str, col: str, scope_path: str):
        super().__init__(
            f'No variable "{name}" in collection "{col}" exists in scope "{scope_path}", '
            f'and it cannot be created here (collection "{col}" is immutable or no init_fn '
            f"was given). Pass mutable=['{col}'] and an init_fn, or variables containing it."
        )


class ScopeCollectionNotFound(CoreError):
    """A variable was read from a collection that is empty (absent) in the variables.

    Cause: usually ``apply(params, x)`` instead of ``apply({'params': params}, x)``, or a
    collection (``batch_stats``) that was never initialized and is not mutable.

    Fix: pass the whole variables dict ``{collection: ...}``; to create the collection,
    make it mutable (``apply(..., mutable=['batch_stats'])``).
    """

    def __init__(self, col_name: str, var_name: str, scope_path: str, hint: str = ""):
        super().__init__(
            f'Tried to access "{var_name}" from collection "{col_name}" in scope '
            f'"{scope_path}" but the collection is empty.'
            + (
                hint
                or " Pass the variables dict as {collection: ...}, or make the collection "
                f"mutable (mutable=['{col_name}']) to create it."
            )
        )


class ModifyScopeVariableError(CoreError):
    """A variable was written in a collection that is not mutable.

    Cause: ``apply`` makes no collection mutable by default; writing ``var.value = ...``
    or ``scope.put_variable`` then fails. Inside a lifted transform, collections that the
    transform does not return (broadcast ones, the cond predicate's scope) are read-only.

    Fix: list the collection in ``mutable=`` (``apply(f, mutable=['batch_stats'])``), or
    lift it as an output of the transform.
    """

    def __init__(self, col: str, variable_name: str, scope_path: str, hint: str = ""):
        super().__init__(
            f'Cannot update variable "{variable_name}" in scope "{scope_path}" because '
            f'collection "{col}" is immutable.'
            + (hint or f" Make it mutable, e.g. apply(fn, mutable=['{col}']).")
        )


class ScopeNameInUseError(CoreError, ValueError):
    """A child scope or variable name was reserved twice in one scope.

    Cause: two ``scope.child(fn, name='x')`` calls, or a child and a variable sharing a
    name (a variable name may repeat only across different collections).

    Fix: give each child and variable a unique name, or omit ``name`` and let
    ``default_name`` number them.
    """

    def __init__(self, name: str, scope_path: str, col: str | None):
        what = f'a variable in collection "{col}"' if col is not None else "a child scope"
        super().__init__(
            f'Name "{name}" is already in use in scope "{scope_path}" (reserving it for '
            f"{what}). Give each child and variable a unique name."
        )


class InvalidScopeError(CoreError):
    """A scope was used after it stopped being valid.

    Cause: the scope given to a function by ``apply``/``init`` or by a lifted transform is
    invalidated when that call returns; keeping it (in a closure, a global) and using it
    later would read or write state that no longer exists.

    Fix: use scopes only inside the function they were passed to; return values instead
    of scopes.
    """

    def __init__(self, scope_path: str):
        super().__init__(
            f'The scope "{scope_path}" is no longer valid: it was invalidated when the '
            "apply/init call or lifted transform that created it returned. Use a scope only "
            "inside the function it is passed to."
        )


class UnliftedCollectionError(ScopeCollectionNotFound):
    """A lifted transform's body used a collection the transform did not lift.

    Cause: ``pack`` lifts only the collections its variable filters match (first match
    wins); the others do not exist inside the transform, for instance ``batch_stats``
    inside ``lift.vmap(..., variable_axes={'params': 0})``.

    Fix: add the collection to the transform's filters (``variable_axes``,
    ``variable_broadcast``, ``variables=``...).
    """

    def __init__(self, col_name: str, var_name: str, scope_path: str, transform: str):
        super().__init__(
            col_name,
            var_name,
            scope_path,
            hint=f' Collection "{col_name}" is not lifted into the transform "{transform}": '
            "its variable filters do not match it. Add it to the transform's variable "
            "filters (e.g. variable_axes / variable_broadcast / variables=).",
        )


# ----------------------------------------------------------------------------- rngs


class InvalidRngError(CoreError, ValueError):
    """An rng stream is missing, or an rng argument is not a PRNG key.

    Cause: ``scope.make_rng('dropout')`` without ``rngs={'dropout': key}``; creating a
    parameter during ``apply`` without a ``params`` key; or ``init``/``apply`` given
    something that is not a key (or a dict of keys).

    Fix: pass every stream the function uses: ``init({'params': k1, 'dropout': k2}, ...)``
    or ``apply(f)(variables, x, rngs={'dropout': k})``.
    """


class UnliftedRngError(InvalidRngError):
    """A lifted transform's body asked for an rng stream the transform did not lift.

    Cause: the transform's rng filters (``split_rngs``, ``rngs=``) do not match the stream,
    so it is not available inside, though it exists outside.

    Fix: add the stream to the transform's rng filters, e.g.
    ``split_rngs={'params': True, 'dropout': True}``.
    """


# ----------------------------------------------------------------------------- init/apply


class ApplyScopeInvalidVariablesTypeError(CoreError, TypeError):
    """The variables given to ``apply``/``bind`` are not a dict of collections.

    Cause: the variables must be ``{collection_name: {name: value}}`` with string keys;
    a bare array or a list was given, or a collection is not a dict.

    Fix: pass the variables dict ``init`` returned (or ``{'params': params}``).
    """

    def __init__(self, detail: str = ""):
        super().__init__(
            "The first argument passed to an apply function should be a dictionary of "
            "collections, each a dictionary with string keys" + (f"; {detail}" if detail else ".")
        )


class ApplyScopeInvalidVariablesStructureError(CoreError, ValueError):
    """The variables given to ``apply`` have an extra ``params`` level.

    Cause: ``apply(f)({'params': variables}, x)`` where ``variables`` already is
    ``{'params': ...}``, giving ``{'params': {'params': ...}}``.

    Fix: pass ``variables`` itself, or ``{'params': variables['params']}``.
    """

    def __init__(self) -> None:
        super().__init__(
            'The variables passed to apply are {"params": {"params": ...}}: they have an '
            'extra "params" level. Pass variables (or {"params": variables["params"]}) '
            "instead of {'params': variables}."
        )


class LazyInitError(CoreError):
    """``lazy_init`` found a variable that depends on an input given only as a shape.

    Cause: inputs passed to ``lazy_init`` as ``jax.ShapeDtypeStruct`` have no values; a
    variable whose initial value uses an input's values cannot be computed.

    Fix: pass that input as an array, or make the initializer use only its shape/dtype.
    """

    def __init__(self, where: str):
        super().__init__(
            f"lazy_init: the variable at {where} depends on the value of an input passed as "
            "jax.ShapeDtypeStruct; pass that input as an array, or initialize the variable "
            "from its shape and dtype only."
        )


# ----------------------------------------------------------------------------- lifting


class LiftError(CoreError, ValueError):
    """A lifted transform (``lift.vmap``, ``lift.scan``, ...) was misused.

    Cause: the message names the transform, the scope path and the problem: inconsistent
    or unknown mapped axis sizes, an unknown scan length, output variables no output
    filter matches, or an argument the transform does not support.

    Fix: as the message says (``axis_size=``/``length=``, or a filter for the collection).
    """


class CarryVariableInitError(LiftError):
    """A carry variable was created inside a ``lift.scan`` or ``lift.while_loop`` body.

    Cause: a carried collection must have the same variables on every iteration; one
    created in the body (during ``init``) would not exist on the first iteration. This is
    a documented limit of lifted scan and while_loop.

    Fix: create the carry variables before the loop (``scope.variable(...)`` outside, or
    call the body once outside the loop), then run the loop.
    """


class BranchVariableMismatchError(LiftError):
    """``lift.cond``/``lift.switch`` branches created or updated different variables.

    Cause: the branches of a conditional must return the same variables (a documented
    limit): creating a parameter or a submodule in only one branch changes the variables'
    structure depending on the predicate.

    Fix: create the same variables in every branch, or run every branch once during
    ``init`` (``if scope.is_mutable_collection('params'): ...``) before the conditional.
    """
