"""The exceptions ``adapters.core`` raises, under ``flax.errors``' names and texts.

``FlaxError`` is the base of every class here (and a ``pytreemod.PytreemodError``).
Classes that exist in ``flax.errors`` have its constructor arguments and message
texts (users and tests match on them), followed, as in Flax, by a link to the class's
entry in Flax's error reference. A few classes of our own refine a Flax class or a
builtin error Flax raises at that point (``ScopeNameInUseError`` is a ``ValueError``,
as Flax raises one there); their messages start with Flax's text where Flax has one.
The Linen-level classes live in ``_errors_linen.py``; ``adapters.errors`` and
``adapters.core.errors`` both re-export all of them.
"""

from typing import Any

import pytreemod as pm

_ERROR_PAGE = "https://flax.readthedocs.io/en/latest/api_reference/flax.errors.html"


def _flax_name(cls: type) -> str | None:
    """The first class in ``cls``' MRO documented in ``flax.errors`` (marked ``_documented``)."""
    for klass in cls.__mro__:
        if klass is FlaxError and cls is not FlaxError:
            return None  # our own refinements of the base: no Flax entry to link
        if klass.__dict__.get("_documented"):
            return klass.__name__
    return None


class FlaxError(pm.PytreemodError):
    """Base class of every ``adapters`` error; catch it to handle any of them.

    The message gets the link to the documented class's entry in Flax's error reference
    appended, as Flax does (not twice, so re-raising a message keeps it single).
    """

    _documented = True

    def __init__(self, message: str):
        name = _flax_name(type(self))
        if name is not None and _ERROR_PAGE not in message:
            message = f"{message} ({_ERROR_PAGE}#flax.errors.{name})"
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclasses take other constructor arguments: copy as a plain FlaxError.
        return (FlaxError, (str(self),))


class TraceContextError(FlaxError):
    """A value was used outside the trace context it belongs to (NNX; kept for the name)."""

    _documented = True


# ----------------------------------------------------------------------------- init/apply


class LazyInitError(FlaxError):
    """``lazy_init`` met a value that depends on an input given only as a shape.

    Fix: pass that input as an array, or compute the variable from shapes only.
    """

    _documented = True

    def __init__(self, partial_val: Any):
        super().__init__(
            "Lazy init encountered a value that could with "
            f"the given inputs (shape: {partial_val})."
        )


class InvalidRngError(FlaxError):
    """An rng stream is missing, or an rng argument is not a PRNG key (or dict of keys).

    Fix: pass every stream used, e.g. ``init({'params': k1, 'dropout': k2}, ...)`` or
    ``apply(..., rngs={'dropout': k})``. The message is given by the raiser.
    """

    _documented = True

    def __init__(self, msg: str):
        super().__init__(msg)


class ApplyScopeInvalidVariablesTypeError(FlaxError):
    """The variables given to ``apply``/``bind`` are not a dict of dicts with string keys.

    Fix: pass the variables ``init`` returned, or ``{'params': params}``.
    """

    _documented = True

    def __init__(self) -> None:
        super().__init__(
            "The first argument passed to an apply function should be "
            "a dictionary of collections. Each collection should be a "
            "dictionary with string keys."
        )


class ApplyScopeInvalidVariablesStructureError(FlaxError):
    """The variables given to ``apply`` have an extra ``params`` level.

    Fix: pass ``variables`` rather than ``{'params': variables}``.
    """

    _documented = True

    def __init__(self, variables: Any):
        super().__init__(
            "Expect the `variables` (first argument) passed to apply() "
            'to be a dict with the structure {"params": ...}, but got a dict '
            'with an extra params layer, i.e.  {"params": {"params": ... } }. '
            'You should instead pass in your dict\'s ["params"].'
        )


# ----------------------------------------------------------------------------- variables


class ScopeParamNotFoundError(FlaxError):
    """A parameter asked for during ``apply`` does not exist and ``params`` is immutable.

    Fix: pass the variables ``init`` returned for this model and keep parameter names
    stable, or make ``params`` mutable to create it.
    """

    _documented = True

    def __init__(self, param_name: str, scope_path: str):
        super().__init__(f'Could not find parameter named "{param_name}" in scope "{scope_path}".')


class ScopeCollectionNotFound(FlaxError):
    """A variable was read from a collection that is absent from the variables.

    Fix: pass the whole variables dict (``{'params': ...}``), or make the collection
    mutable so that it is created. ``hint`` (ours) is appended to Flax's text: a
    collection of the variables whose name nearly matches (``'param'``) is named as a
    likely typo.
    """

    _documented = True

    def __init__(self, col_name: str, var_name: str, scope_path: str, *, hint: str = ""):
        super().__init__(
            f'Tried to access "{var_name}" from collection "{col_name}" in '
            f'"{scope_path}" but the collection is empty.' + hint
        )


class ScopeParamShapeError(FlaxError):
    """An existing parameter's shape differs from the one its initializer produces.

    Fix: call ``apply`` with inputs shaped as at ``init``, or re-initialize.
    """

    _documented = True

    def __init__(self, param_name: str, scope_path: str, value_shape: Any, init_shape: Any):
        super().__init__(
            f'For parameter "{param_name}" in "{scope_path}", the given '
            f"initializer is expected to generate shape {init_shape}, but the "
            f"existing parameter it received has shape {value_shape}."
        )


class ScopeVariableNotFoundError(FlaxError):
    """A variable does not exist and cannot be created (immutable, or no init function).

    Fix: make the collection mutable and pass an init function, or pass variables
    that contain it.
    """

    _documented = True

    def __init__(self, name: str, col: str, scope_path: str):
        super().__init__(
            f'No Variable named "{name}" for collection "{col}" exists in "{scope_path}".'
        )


class InvalidFilterError(FlaxError):
    """A value that is not a collection filter was used as one.

    Fix: use a name, a list of names, ``True``/``False`` or ``DenyList(...)``.
    """

    _documented = True

    def __init__(self, filter_like: Any):
        super().__init__(f'Invalid Filter: "{filter_like}"')


class InvalidScopeError(FlaxError):
    """A scope was used after the call that created it returned.

    Fix: use a scope only inside the function it is passed to.
    """

    _documented = True

    def __init__(self, scope_name: str):
        super().__init__(f'The scope "{scope_name}" is no longer valid.')


class ModifyScopeVariableError(FlaxError):
    """A variable was written in a collection that is not mutable.

    Fix: list the collection in ``mutable=`` (or lift it out of the transform).
    ``hint`` (ours) is appended to Flax's text: a ``mutable=`` name that nearly matches
    (``'batch_stat'``) is named as a likely typo.
    """

    _documented = True

    def __init__(self, col: str, variable_name: str, scope_path: str, *, hint: str = ""):
        super().__init__(
            f'Cannot update variable "{variable_name}" in '
            f'"{scope_path}" because collection "{col}" is immutable.' + hint
        )


class ImmutableVariableError(FlaxError):
    """A variable marked immutable was updated (the message is given by the raiser)."""

    _documented = True

    def __init__(self, message: str):
        super().__init__(message)


class JaxTransformError(FlaxError):
    """A plain JAX transform was mixed with Flax modules; use the lifted transforms."""

    _documented = True

    def __init__(self) -> None:
        super().__init__("Jax transforms and Flax models cannot be mixed.")


# ----------------------------------------------------------------------------- meta


class PartitioningUnspecifiedError(FlaxError):
    """A transform adds an axis to a ``Partitioned`` box without a ``partition_name``.

    Fix: pass ``metadata_params={'partition_name': ...}`` (``nn.PARTITION_NAME``).
    """

    _documented = True

    def __init__(self, target: Any):
        super().__init__(
            'Trying to transform a Partitioned variable but "partition_name"'
            f" is not specified in metadata_params: {target}"
        )


# ----------------------------------------------------------------------------- ours


class ScopeNameInUseError(FlaxError, ValueError):
    """A child scope or variable name was reserved twice in one scope.

    Flax raises a ``ValueError`` with the same text here. Fix: use unique names (a
    variable name may repeat only across collections).
    """

    def __init__(self, name: str, scope_path: str = "", col: str | None = None):
        where = f" in scope {scope_path!r}" if scope_path else ""
        super().__init__(f'Duplicate use of scope name: "{name}"{where}')


class UnliftedCollectionError(ScopeCollectionNotFound):
    """A lifted transform's body read a collection that the transform does not lift.

    Fix: add the collection to the transform's variable filters.
    """

    def __init__(self, col_name: str, var_name: str, scope_path: str, transform: str):
        super().__init__(
            col_name,
            var_name,
            scope_path,
            hint=f' Collection "{col_name}" is not lifted into the transform "{transform}": '
            "add it to the transform's variable filters (variable_axes, variable_broadcast, "
            "variables=...).",
        )


class UnliftedRngError(InvalidRngError):
    """A lifted transform's body asked for an rng stream the transform does not lift.

    Fix: add the stream to the transform's rng filters (``split_rngs``, ``rngs=``).
    """


class LiftError(FlaxError, ValueError):
    """A lifted transform was misused (Flax raises a ``ValueError`` with the same text).

    The message names the problem: inconsistent or unknown axis sizes or scan lengths,
    output variables no filter matches, an unsupported argument.
    """


class CarryVariableInitError(LiftError):
    """A carried variable was created inside a ``lift.scan``/``lift.while_loop`` body.

    Fix: create carried variables before the loop.
    """


class BranchVariableMismatchError(LiftError):
    """``lift.cond``/``lift.switch`` branches created or updated different variables.

    Fix: create the same variables in every branch.
    """


CoreError = FlaxError
"""Former name of the base class (kept as an alias)."""
