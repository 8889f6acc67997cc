"""``flax.nnx.deprecations``: an alias of a renamed function that warns when called."""

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])


def deprecated(new_fn: F) -> F:
    """A stand-in for ``new_fn`` under its old name: each call warns with a
    ``DeprecationWarning`` naming ``new_fn``, then calls it with the same arguments.

    The stand-in keeps ``new_fn``'s name, signature and annotations, and its docstring
    starts with a deprecation notice.

    >>> def twice(x):
    ...     return 2 * x
    >>> double = deprecated(twice)
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     double(3), caught[0].category.__name__
    (6, 'DeprecationWarning')
    """
    name = new_fn.__qualname__

    @functools.wraps(new_fn)
    def alias(*args: Any, **kwargs: Any) -> Any:
        warnings.warn(
            f"This function is deprecated. Use {name} instead.", DeprecationWarning, stacklevel=2
        )
        return new_fn(*args, **kwargs)

    alias.__doc__ = f".. deprecated::\n   Use :func:`{name}` instead.\n\n" + (new_fn.__doc__ or "")
    return cast(F, alias)
