"""The variable and rng API of Linen modules (a mixin of ``Module``).

Every method delegates to the module's core ``Scope``; this layer adds Linen's rules:
variables are only *created* in ``setup`` or a ``@compact`` method, a name is used once
per module (``NameInUseError``), and unbound modules get a clear ``ValueError``.
"""

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import jax
import jax.numpy as jnp

from ... import errors
from ...core import Scope, Variable

T = TypeVar("T")
K = TypeVar("K")


def tuple_reduce(xs: tuple[Any, ...], x: Any) -> tuple[Any, ...]:
    """``sow``'s default reduction: append to a tuple."""
    return (*xs, x)


def tuple_init() -> tuple[()]:
    """``sow``'s default initial value: the empty tuple."""
    return ()


def _rng_error(scope: Scope, name: str) -> "errors.InvalidRngError":
    return errors.InvalidRngError(
        f'{scope.name} needs PRNG for "{name}" (scope "{scope.path_text}"): pass '
        f"rngs={{'{name}': key}} to init/apply."
    )


class _VariablesMixin:
    if TYPE_CHECKING:
        scope: Scope | None
        _state: Any

        @property
        def _initialization_allowed(self) -> bool: ...

        def _name_taken(
            self, name: str, reuse_scopes: bool = False, collection: str | None = None
        ) -> bool: ...

    def _bound_scope(self, what: str) -> Scope:
        scope = self.scope
        if scope is None:
            raise ValueError(f"Can't {what} on unbound modules")
        return scope

    def variable(
        self,
        col: str,
        name: str,
        init_fn: Callable[..., Any] | None = None,
        *init_args: Any,
        unbox: bool = True,
        **init_kwargs: Any,
    ) -> Variable[Any]:
        """Declare variable ``name`` of collection ``col`` (created with
        ``init_fn(*init_args, **init_kwargs)`` if missing); returns a ``Variable``."""
        if not self._initialization_allowed:
            raise ValueError(
                "Variables must be initialized in `setup()` or in a method wrapped in `@compact`"
            )
        scope = self._bound_scope("access variables")
        if self._name_taken(name, collection=col):
            raise errors.NameInUseError("variable", name, type(self).__name__)
        v = scope.variable(col, name, init_fn, *init_args, unbox=unbox, **init_kwargs)
        self._state.children[name] = col
        return v

    def param(
        self,
        name: str,
        init_fn: Callable[..., Any],
        *init_args: Any,
        unbox: bool = True,
        **init_kwargs: Any,
    ) -> Any:
        """Declare parameter ``name`` (collection ``params``), created with
        ``init_fn(self.make_rng('params'), *init_args, **init_kwargs)`` if missing.

        An existing value is checked against the shape ``init_fn`` would give
        (``ScopeParamShapeError``); axis-metadata boxes are removed unless ``unbox=False``.
        """
        if not self._initialization_allowed:
            raise ValueError(
                "Parameters must be initialized in `setup()` or in a method wrapped in `@compact`"
            )
        scope = self._bound_scope("access variables")
        if self._name_taken(name, collection="params"):
            raise errors.NameInUseError("param", name, type(self).__name__)
        try:
            value = scope.param(name, init_fn, *init_args, unbox=unbox, **init_kwargs)
        except errors.InvalidRngError as e:
            if type(e) is errors.InvalidRngError and not scope.has_rng("params"):
                raise _rng_error(scope, "params") from e
            raise
        self._state.children[name] = "params"
        return value

    def has_variable(self, col: str, name: str) -> bool:
        """Whether variable ``name`` exists in collection ``col`` of this module."""
        return self._bound_scope("access variables").has_variable(col, name)

    def is_mutable_collection(self, col: str) -> bool:
        """Whether collection ``col`` may be written."""
        return self._bound_scope("check mutability").is_mutable_collection(col)

    def has_rng(self, name: str) -> bool:
        """Whether an rng stream ``name`` was given."""
        return self._bound_scope("query for RNGs").has_rng(name)

    def make_rng(self, name: str = "params") -> jax.Array:
        """A new key from stream ``name`` (falling back to ``params`` if it is missing)."""
        scope = self._bound_scope("use RNGs")
        try:
            return scope.make_rng(name)
        except errors.InvalidRngError as e:
            if type(e) is errors.InvalidRngError and not scope.has_rng(name):
                raise _rng_error(scope, name) from e
            raise

    def is_initializing(self) -> bool:
        """Whether this runs under ``init`` (``Module.init`` or ``nn.init``)."""
        scope = self._bound_scope("check if running under init()")
        return bool(scope.get_flag("initializing", False))

    @property
    def variables(self) -> dict[str, Any]:
        """This module's variables, ``{collection: nested dict}``."""
        return self._bound_scope("access variables").variables()

    def get_variable(self, col: str, name: str, default: Any = None) -> Any:
        """The stored value of variable ``name`` in ``col`` (axis-metadata boxes kept, as
        in Flax), or ``default``."""
        scope = self._bound_scope("access variables")
        return scope.get_variable(col, name, default, unbox=False)

    def put_variable(self, col: str, name: str, value: Any) -> None:
        """Set variable ``name`` of (mutable) collection ``col`` to ``value``."""
        self._bound_scope("access variables").put_variable(col, name, value)

    def sow(
        self,
        col: str,
        name: str,
        value: Any,
        reduce_fn: Callable[[Any, Any], Any] = tuple_reduce,
        init_fn: Callable[[], Any] = tuple_init,
    ) -> bool:
        """Store ``value`` in variable ``name`` of ``col`` if ``col`` is mutable.

        The stored value starts as ``init_fn()`` and each call replaces it with
        ``reduce_fn(stored, value)`` (by default a tuple of every sown value). Returns
        whether the value was stored.
        """
        scope = self._bound_scope("store variables")
        if not scope.is_mutable_collection(col):
            return False
        if scope.has_variable(col, name):
            xs = scope.get_variable(col, name)
        else:
            scope.reserve(name, col)
            self._state.children[name] = col
            xs = init_fn()
        scope.put_variable(col, name, reduce_fn(xs, value))
        return True

    def perturb(self, name: str, value: Any, collection: str = "perturbations") -> Any:
        """Add a zero-initialised variable to ``value``: the gradient with respect to
        that variable is the gradient with respect to the intermediate ``value``.

        Creates the variable when ``collection`` is mutable; when the collection is given
        but lacks ``name`` it is an error.
        """
        scope = self._bound_scope("store variables")
        if scope.is_mutable_collection(collection) and not scope.has_variable(collection, name):
            scope.reserve(name, collection)
            self._state.children[name] = collection
            scope.put_variable(collection, name, jax.tree.map(jnp.zeros_like, value))
        if _collection_given(scope, collection):
            if not scope.has_variable(collection, name):
                raise ValueError(
                    f"Perturbation collection {collection} present, but missing perturbation "
                    f"variable {name}"
                )
            value = jax.tree.map(jnp.add, value, scope.get_variable(collection, name))
        return value


def _collection_given(scope: Scope, collection: str) -> bool:
    """Whether the root variables have ``collection`` at all (even empty)."""
    root_variables = getattr(scope.root, "_variables", None)
    if isinstance(root_variables, dict):
        return collection in root_variables
    return not scope.is_collection_empty(collection)
