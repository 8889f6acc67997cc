"""The ``flax.errors`` classes raised above the core: Linen modules, transforms, I/O.

Defined next to the core ones (``_errors.py``) so that there is a single set of
classes; they depend on nothing but ``FlaxError``. Constructor arguments and message
texts are Flax's.
"""

from typing import Any

from ._errors import FlaxError


class NameInUseError(FlaxError):
    """A submodule, parameter or variable name is used twice in one Module.

    ``key_type`` is ``'param'``, ``'variable'`` or ``'submodule'``; all share one namespace.
    """

    _documented = True

    def __init__(self, key_type: str, value: Any, module_name: Any):
        super().__init__(
            f'Could not create {key_type} "{value}" in Module {module_name}: Name in use.'
        )


class AssignSubModuleError(FlaxError):
    """A submodule was created outside ``setup()`` or a ``@compact`` method."""

    _documented = True

    def __init__(self, cls: Any):
        super().__init__(
            f"Submodule {cls} must be defined in `setup()` or in a method wrapped in `@compact`"
        )


class SetAttributeInModuleSetupError(FlaxError):
    """A Module construction attribute (dataclass field) was assigned in ``setup()``."""

    _documented = True

    def __init__(self) -> None:
        super().__init__("Module construction attributes are frozen.")


class SetAttributeFrozenModuleError(FlaxError):
    """A Module attribute was assigned outside ``setup()`` (the instance is frozen)."""

    _documented = True

    def __init__(self, module_cls: Any, attr_name: str, attr_val: Any):
        super().__init__(
            f"Can't set {attr_name}={attr_val} for Module of type "
            f"{module_cls}: Module instance is frozen outside of setup method."
        )


class MultipleMethodsCompactError(FlaxError):
    """More than one method of a Module class is decorated ``@compact``."""

    _documented = True

    def __init__(self) -> None:
        super().__init__("Only one method per class can be @compact")


class ReservedModuleAttributeError(FlaxError):
    """A Module subclass declared a field named ``parent`` or ``name``."""

    _documented = True

    def __init__(self, annotations: Any):
        super().__init__(f"properties `parent` and `name` are reserved: {annotations}")


class ApplyModuleInvalidMethodError(FlaxError):
    """``apply(method=...)`` got something that is neither a method, a name nor a function."""

    _documented = True

    def __init__(self, method: Any):
        super().__init__(f"Cannot call apply(): {method} is not a valid function for apply().")


class CallCompactUnboundModuleError(FlaxError):
    """A ``@compact`` method was called on a Module not bound to variables (use ``apply``)."""

    _documented = True

    def __init__(self) -> None:
        super().__init__("Can't call compact methods on unbound modules")


class CallSetupUnboundModuleError(FlaxError):
    """``setup`` (or a ``setup``-defined attribute) was used on an unbound Module."""

    _documented = True

    def __init__(self) -> None:
        super().__init__("Can't call compact methods on unbound modules")


class CallUnbindOnUnboundModuleError(FlaxError):
    """``unbind()`` was called on a Module that is not bound."""

    _documented = True

    def __init__(self) -> None:
        super().__init__("Can't call `unbind()` on unbound modules")


class CallShareScopeOnUnboundModuleError(FlaxError):
    """``share_scope`` was called with a Module that is not bound."""

    _documented = True

    def __init__(self) -> None:
        super().__init__("Can't call `share_scope` on unbound modules")


class InvalidInstanceModuleError(FlaxError):
    """``init``/``init_with_output``/``apply`` was called on a Module class, not an instance."""

    _documented = True

    def __init__(self) -> None:
        super().__init__(
            "Can only call init, init_with_output or apply methods on an instance"
            " of the Module class, not the Module class itself"
        )


class IncorrectPostInitOverrideError(FlaxError):
    """A Module overrode ``__post_init__`` without calling ``super().__post_init__()``."""

    _documented = True

    def __init__(self) -> None:
        super().__init__("Overrode `.__post_init__()` without calling `super().__post_init__()`")


class DescriptorAttributeError(FlaxError):
    """A property of a Module raised ``AttributeError`` (it reads a missing attribute)."""

    _documented = True

    def __init__(self) -> None:
        super().__init__("Trying to access a property that is accessing a non-existent attribute.")


class InvalidCheckpointError(FlaxError):
    """A checkpoint older than an existing one was about to be saved."""

    _documented = True

    def __init__(self, path: Any, step: Any):
        super().__init__(
            f'Trying to save an outdated checkpoint at step: "{step}" and path: "{path}".'
        )


class MPACheckpointingRequiredError(FlaxError):
    """A target holding multiprocess arrays needs the multiprocess checkpoint manager."""

    _documented = True

    def __init__(self, path: Any, step: Any):
        super().__init__(
            f'Checkpoint failed at step: "{step}" and path: "{path}": Target '
            "contains a multiprocess array should be saved/restored with a "
            "GlobalAsyncCheckpointManager."
        )


class MPARestoreTargetRequiredError(FlaxError):
    """A checkpoint with multiprocess arrays was restored without a target of arrays."""

    _documented = True

    def __init__(self, path: Any, step: Any, key: Any = None):
        msg = (
            f'Restore checkpoint failed at step: "{step}" and path: "{path}": '
            "Checkpoints containing a multiprocess array need to be restored with "
            "a target with pre-created arrays. If you cannot provide a full valid "
            "target, consider ``allow_partial_mpa_restoration=True``. "
        )
        if key:
            msg += f"This error fired when trying to restore array at {key}."
        super().__init__(msg)


class MPARestoreDataCorruptedError(FlaxError):
    """A multiprocess-array checkpoint directory has no commit marker (save was cut)."""

    _documented = True

    def __init__(self, step: Any, path: Any):
        super().__init__(
            f'Restore checkpoint failed at step: "{step}" on multiprocess array at '
            f' "{path}": No "commit_success.txt" found on this "_gda" directory. '
            "Was its save halted before completion?"
        )


class TransformedMethodReturnValueError(FlaxError):
    """A method under a Linen transform returned a Module or a Variable."""

    _documented = True

    def __init__(self, name: str):
        super().__init__(f"Transformed module method {name} cannot return Modules or Variables.")


class TransformTargetError(FlaxError):
    """A Linen transform was given a Module instance (or a non-callable) as its target.

    Transform the Module class, or a function taking the Module as first argument.
    """

    _documented = True

    def __init__(self, target: Any):
        super().__init__(
            "Linen transformations must be applied to Modules classes or"
            " functions taking a Module instance as the first argument."
            f" The provided target is not a Module class or callable: {target}"
        )


class AlreadyExistsError(FlaxError):
    """A copy would overwrite an existing file (pass ``overwrite=True``)."""

    _documented = True

    def __init__(self, path: Any):
        super().__init__(f'Trying overwrite an existing file: "{path}".')


class CursorFindError(FlaxError):
    """``Cursor.find()`` found no object, or more than one, satisfying ``cond_fn``."""

    _documented = True

    def __init__(self, cursor: Any = None, cursor2: Any = None):
        # ``is not None``: a cursor's truth is its object's length (a leaf has none)
        if cursor is not None and cursor2 is not None:
            super().__init__(
                "More than one object found given the conditions of the cond_fn. "
                "The first two objects found have the following paths: "
                f"{cursor._path} and {cursor2._path}"
            )
        else:
            super().__init__("No object found given the conditions of the cond_fn.")


class TraverseTreeError(FlaxError):
    """A cursor traversal got both or neither of ``update_fn`` and ``cond_fn``."""

    _documented = True

    def __init__(self, update_fn: Any, cond_fn: Any):
        if update_fn is None and cond_fn is None:
            super().__init__(
                "Both update_fn and cond_fn are None. Exactly one of them must be None."
            )
        else:
            super().__init__(
                "Both update_fn and cond_fn are not None. Exactly one of them must be not None."
            )
