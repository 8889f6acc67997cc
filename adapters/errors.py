"""``adapters.errors``: the exception classes, under ``flax.errors``' names.

Provisional (written by the Linen module helper while ``adapters.errors`` did not exist
yet): the core errors are re-exported from ``adapters.core.errors``; the Linen Module
errors are defined here with Flax's message texts.
"""

from typing import Any

import pytreemod as pm

from .core.errors import *  # noqa: F403
from .core.errors import CoreError, InvalidRngError  # noqa: F401


class FlaxError(pm.PytreemodError):
    """Base class of the Linen errors."""


class NameInUseError(FlaxError):
    """A name is used twice in one module (for submodules, params or variables).

    Fix: give each submodule and variable a distinct name within its module.
    """

    def __init__(self, key_type: str, value: Any, module_name: str):
        super().__init__(
            f'Could not create {key_type} "{value}" in Module {module_name}: Name in use.'
        )


class AssignSubModuleError(FlaxError):
    """A submodule was created outside ``setup`` and outside a ``@compact`` method.

    Fix: create submodules in ``setup`` or decorate the method with ``@nn.compact``.
    """

    def __init__(self, cls: str):
        super().__init__(
            f"Submodule {cls} must be defined in `setup()` or in a method wrapped in `@compact`"
        )


class SetAttributeInModuleSetupError(FlaxError):
    """A dataclass attribute was assigned in ``setup``; construction attributes are frozen."""

    def __init__(self) -> None:
        super().__init__("Module construction attributes are frozen.")


class SetAttributeFrozenModuleError(FlaxError):
    """An attribute of a module was set outside ``setup``; modules are frozen.

    Fix: assign in ``setup``, or create a new module with ``module.clone(attr=value)``.
    """

    def __init__(self, module_cls: str, attr_name: str, attr_val: Any):
        super().__init__(
            f"Can't set {attr_name}={attr_val} for Module of type {module_cls}: Module "
            "instance is frozen outside of setup method."
        )


class MultipleMethodsCompactError(FlaxError):
    """More than one method of a class is ``@compact``."""

    def __init__(self) -> None:
        super().__init__("Only one method per class can be @compact")


class ReservedModuleAttributeError(FlaxError):
    """A module declares an attribute named ``parent`` or ``name`` (reserved)."""

    def __init__(self, annotations: Any):
        super().__init__(f"properties `parent` and `name` are reserved: {annotations}")


class ApplyModuleInvalidMethodError(FlaxError):
    """``apply(method=...)`` got something that is not a function taking the module."""

    def __init__(self, method: Any):
        super().__init__(f"Cannot call apply(): {method} is not a valid function for apply().")


class CallCompactUnboundModuleError(FlaxError):
    """A ``@compact`` method of an unbound module was called; use ``init``/``apply``."""

    def __init__(self) -> None:
        super().__init__("Can't call compact methods on unbound modules")


class CallSetupUnboundModuleError(FlaxError):
    """``setup`` of an unbound module was called; bind it or use ``init``/``apply``."""

    def __init__(self) -> None:
        super().__init__("Can't call compact methods on unbound modules")


class CallUnbindOnUnboundModuleError(FlaxError):
    """``unbind`` was called on a module that is not bound."""

    def __init__(self) -> None:
        super().__init__("Can't call `unbind()` on unbound modules")


class CallShareScopeOnUnboundModuleError(FlaxError):
    """``share_scope`` was called with an unbound module."""

    def __init__(self) -> None:
        super().__init__("Can't call `share_scope` on unbound modules")


class InvalidInstanceModuleError(FlaxError):
    """``init``/``apply``/``bind`` called on a Module class instead of an instance."""

    def __init__(self) -> None:
        super().__init__(
            "Can only call init, init_with_output or apply methods on an instance of the "
            "Module class, not the Module class itself"
        )


class IncorrectPostInitOverrideError(FlaxError):
    """``__post_init__`` was overridden without calling ``super().__post_init__()``."""

    def __init__(self) -> None:
        super().__init__("Overrode `.__post_init__()` without calling `super().__post_init__()`")


class DescriptorAttributeError(FlaxError):
    """A property (or other descriptor) accessed an attribute that does not exist."""

    def __init__(self) -> None:
        super().__init__("Trying to access a property that is accessing a non-existent attribute.")


class TransformedMethodReturnValueError(FlaxError):
    """A transformed module method returned a Module or Variable."""

    def __init__(self, name: str | None):
        super().__init__(f"Transformed module method {name} cannot return Modules or Variables.")


class TransformTargetError(FlaxError):
    """A Linen transform was applied to something that is not a Module class or a
    function taking a module."""

    def __init__(self, target: Any):
        super().__init__(
            "Linen transformations must be applied to Modules classes or functions taking a "
            f"Module instance as the first argument. The provided target is not a Module "
            f"class or callable: {target}"
        )


class JaxTransformError(FlaxError):
    """A JAX transform was applied across Flax module state."""

    def __init__(self) -> None:
        super().__init__("Jax transforms and Flax models cannot be mixed.")
