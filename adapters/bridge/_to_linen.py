"""``ToLinen``: a pytreemod Module used as a Linen module.

On ``init`` the pytreemod module is built (or taken as given) and each of its
collections becomes the Linen collection of the same name, under this module's scope:
``variables[collection][field][...]``, boxes kept. On ``apply`` the module is rebuilt from
those variables with ``pm.from_variables``, called under ``pm.apply``, and the variables
it wrote are put back with ``put_variable``, so Linen's ``mutable=`` decides what may
change (a write to another collection raises Linen's ``ModifyScopeVariableError``).

A ``call_rngs`` stream that neither ``init``/``apply`` nor the ``params`` fallback provides
is not passed: a deterministic call needs none. If the call then fails and would have run
with a key, the error (``InvalidRngError``) names this module and the stream to pass.
"""

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import jax

import pytreemod as pm

from .. import errors
from .. import linen as nn
from ..core import FrozenDict
from ._keys import from_linen_keys, to_linen_keys


def _is_var(x: Any) -> bool:
    return isinstance(x, pm.Variable)


def _takes(factory: Any, keyword: str) -> bool:
    """Whether ``factory`` accepts ``keyword`` (true where its signature cannot be read)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == keyword or p.kind is p.VAR_KEYWORD for p in params)


def _hashable(x: Any) -> Any:
    try:
        hash(x)
    except TypeError:
        return pm.structure_of(x)
    return x


# eval_shape skeletons of factory-built modules, by (factory, args, kwargs, key_arg).
_TEMPLATES: dict[Any, Any] = {}
_MAX_TEMPLATES = 256


class ToLinen(nn.Module):
    """A pytreemod Module wrapped as a Linen module.

    **Attributes:**

    - ``module``: a pytreemod Module instance, or a factory (usually the class) called as
      ``module(*args, key=<key>, **kwargs)`` at ``init``; the key comes from
      ``make_rng(rng_collection)`` unless ``kwargs`` holds ``key_arg`` already.
    - ``args``, ``kwargs``: the factory's arguments.
    - ``method``: the name of the method a call runs (default ``__call__``).
    - ``rng_collection``: the rng stream that provides the build key (``params``).
    - ``key_arg``: the factory's keyword for the key (``key``); ``None`` passes no key,
      and neither does a factory whose signature has no such keyword
      (``pm.nn.Dropout``).
    - ``call_rngs``: ``{call keyword: rng stream}``; each call not given that keyword gets
      ``make_rng(stream)`` there (``{"key": "dropout"}`` for ``pm.nn.Dropout``), when the
      stream (or ``params``, Linen's fallback) is provided; otherwise nothing.

    Calling the Linen module calls ``method`` of the rebuilt pytreemod module with the
    same arguments.
    """

    module: Any
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = FrozenDict()
    method: str = "__call__"
    rng_collection: str = "params"
    key_arg: str | None = "key"
    call_rngs: Mapping[str, str] = FrozenDict()

    def __hash__(self) -> int:
        # A module instance (arrays) hashes by its structure, so a ToLinen holding one can
        # be a static field (of ToPytreemod, or a jit argument): equal modules, equal hash.
        fields = (self.module, self.args, self.kwargs, self.method, self.rng_collection)
        return hash((type(self), *map(_hashable, fields), self.key_arg, self.call_rngs, self.name))

    def _needs_key(self) -> bool:
        """Whether building calls the factory with a key from ``rng_collection``."""
        if isinstance(self.module, pm.Module) or self.key_arg is None:
            return False
        return self.key_arg not in self.kwargs and _takes(self.module, self.key_arg)

    def _build(self, key: jax.Array | None) -> Any:
        if isinstance(self.module, pm.Module):
            return self.module
        kwargs = dict(self.kwargs)
        if self._needs_key():
            kwargs[str(self.key_arg)] = key
        return self.module(*self.args, **kwargs)

    def _template(self) -> Any:
        if isinstance(self.module, pm.Module):
            return self.module
        cache_key = (self.module, self.args, self.kwargs, self.key_arg)
        try:
            return _TEMPLATES[cache_key]
        except TypeError:  # unhashable arguments: build the skeleton every time
            return self._skeleton()
        except KeyError:
            pass
        if len(_TEMPLATES) >= _MAX_TEMPLATES:
            _TEMPLATES.pop(next(iter(_TEMPLATES)))
        template = _TEMPLATES[cache_key] = self._skeleton()
        return template

    def _skeleton(self) -> Any:
        key = jax.random.key(0) if self._needs_key() else None
        return pm.eval_shape(lambda: self._build(key))

    def _stored(self) -> dict[str, Any]:
        return {c: v for c, v in self.variables.items() if v}

    def rebuild(self, variables: Mapping[str, Any]) -> Any:
        """The pytreemod module held in ``variables`` (this module's own variables,
        ``{collection: {field: ...}}``, as ``init`` returns them for a top-level
        ``ToLinen``)."""
        template = self._template()
        like = pm.to_variables(template)
        own = {c: from_linen_keys(v, like.get(c, {})) for c, v in variables.items() if v}
        return pm.from_variables(template, own)

    @nn.compact
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        missing: dict[str, str] = {}  # call keyword -> a stream nobody provides
        for keyword, stream in self.call_rngs.items():
            if keyword in kwargs:
                continue
            if self._has_rng(stream):
                kwargs[keyword] = self.make_rng(stream)
            else:
                missing[keyword] = stream
        stored = self._stored()
        if self.is_initializing() and not stored:
            needs_key = self._needs_key()
            if needs_key and not self._has_rng(self.rng_collection):
                raise self._rng_error(self.rng_collection, f"the {self.key_arg}= that builds it")
            model = self._build(self.make_rng(self.rng_collection) if needs_key else None)
            for col, tree in to_linen_keys(pm.to_variables(model)).items():
                if not self.is_mutable_collection(col):
                    continue  # as in Linen: init's mutable= says what is kept
                for name, value in tree.items():
                    self.put_variable(col, name, value)
            out, _ = self._call(model, missing, args, kwargs)
            return out  # init keeps the module as built: writes of this call are dropped
        model = self.rebuild(stored)
        out, new = self._call(model, missing, args, kwargs)
        if not self.is_initializing():  # as for a first call, init drops the writes
            self._put_writes(model, new)
        return out

    def _has_rng(self, stream: str) -> bool:
        # make_rng falls back to ``params`` where a stream is missing (as Flax's does).
        return self.has_rng(stream) or self.has_rng("params")

    def _label(self) -> str:
        wrapped = self.module if not isinstance(self.module, pm.Module) else type(self.module)
        name = getattr(wrapped, "__name__", type(wrapped).__name__)
        path = self.scope.path_text if self.scope is not None else "/"
        return f'ToLinen "{path}" ({name})'

    def _rng_error(self, stream: str, use: str) -> errors.InvalidRngError:
        return errors.InvalidRngError(
            f'{self._label()} needs PRNG for "{stream}" ({use}): pass '
            f"rngs={{'{stream}': key}} to init/apply."
        )

    def _call(
        self, model: Any, missing: dict[str, str], args: Any, kwargs: dict[str, Any]
    ) -> tuple[Any, Any]:
        """``pm.apply`` of ``method``; a failure that a key for a ``missing`` stream would
        have avoided (the call runs under ``eval_shape`` with one) is an ``InvalidRngError``."""
        call = getattr(model, self.method)
        try:
            return pm.apply(call, *args, mutable=True, **kwargs)
        except pm.PytreemodError as error:
            if not missing:
                raise
            keys = {keyword: jax.random.key(0) for keyword in missing}
            try:
                jax.eval_shape(lambda: pm.apply(call, *args, mutable=True, **kwargs, **keys))
            except Exception:
                raise error from None  # not (only) the missing key
            keyword, stream = next(iter(missing.items()))
            raise self._rng_error(stream, f"the {keyword}= of its {self.method}") from error

    def _put_writes(self, old: Any, new: Any) -> None:
        old_leaves = jax.tree.leaves(old, is_leaf=_is_var)
        new_leaves = jax.tree.leaves(new, is_leaf=_is_var)
        written = {
            a.collection
            for a, b in zip(old_leaves, new_leaves, strict=True)
            if _is_var(a) and a is not b
        }
        if not written:
            return
        variables = to_linen_keys(pm.to_variables(new))
        for col in sorted(written):
            for name, value in variables[col].items():
                self.put_variable(col, name, value)


def to_linen(
    module: Callable[..., Any] | pm.Module,
    *args: Any,
    name: str | None = None,
    method: str = "__call__",
    rng_collection: str = "params",
    key_arg: str | None = "key",
    call_rngs: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> ToLinen:
    """``ToLinen(module, args, kwargs, ...)`` with the factory's arguments given inline:
    ``to_linen(pm.nn.Linear, 3, 4)``."""
    return ToLinen(
        module,
        args=args,
        kwargs=FrozenDict(kwargs),
        method=method,
        rng_collection=rng_collection,
        key_arg=key_arg,
        call_rngs=FrozenDict(call_rngs or {}),
        name=name,
    )
