# Stub for the part of optax this project uses. optax ships no py.typed, and its
# annotations type parameters as ``ArrayTree`` (arrays, iterables and mappings of them),
# narrower than what it accepts: any PyTree, a pytreemod Module included (optax maps over
# it with jax.tree). Here a tree is ``Any`` and ``apply_updates`` / ``update`` return the
# type they were given, as they do at run time. Signatures follow optax 0.2.x.
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, TypeAlias, TypeVar

import jax

_T = TypeVar("_T")

ArrayTree: TypeAlias = Any
Params: TypeAlias = Any
Updates: TypeAlias = Any
OptState: TypeAlias = Any
Schedule: TypeAlias = Callable[[jax.typing.ArrayLike], jax.typing.ArrayLike]
ScalarOrSchedule: TypeAlias = float | jax.Array | Schedule

class TransformInitFn(Protocol):
    def __call__(self, params: Params) -> OptState: ...

class TransformUpdateFn(Protocol):
    def __call__(
        self, updates: _T, state: OptState, params: Params | None = None
    ) -> tuple[_T, OptState]: ...

class TransformUpdateExtraArgsFn(Protocol):
    def __call__(
        self, updates: _T, state: OptState, params: Params | None = None, **extra_args: Any
    ) -> tuple[_T, OptState]: ...

class GradientTransformation(NamedTuple):
    init: TransformInitFn
    update: TransformUpdateFn

class GradientTransformationExtraArgs(GradientTransformation): ...

def apply_updates(params: _T, updates: Updates) -> _T: ...
def chain(*args: GradientTransformation) -> GradientTransformationExtraArgs: ...
def adam(
    learning_rate: ScalarOrSchedule,
    b1: jax.typing.ArrayLike = 0.9,
    b2: jax.typing.ArrayLike = 0.999,
    eps: jax.typing.ArrayLike = 1e-8,
    eps_root: jax.typing.ArrayLike = 0.0,
    mu_dtype: Any | None = None,
    *,
    nesterov: bool = False,
) -> GradientTransformationExtraArgs: ...
def adamw(
    learning_rate: ScalarOrSchedule,
    b1: jax.typing.ArrayLike = 0.9,
    b2: jax.typing.ArrayLike = 0.999,
    eps: jax.typing.ArrayLike = 1e-8,
    eps_root: jax.typing.ArrayLike = 0.0,
    mu_dtype: Any | None = None,
    weight_decay: ScalarOrSchedule = 1e-4,
    mask: Any | Callable[[Params], Any] | None = None,
    *,
    nesterov: bool = False,
) -> GradientTransformationExtraArgs: ...
def sgd(
    learning_rate: ScalarOrSchedule,
    momentum: jax.typing.ArrayLike | None = None,
    nesterov: bool = False,
    accumulator_dtype: Any | None = None,
) -> GradientTransformationExtraArgs: ...
def clip_by_global_norm(max_norm: jax.typing.ArrayLike) -> GradientTransformation: ...
def scale_by_schedule(step_size_fn: Schedule) -> GradientTransformation: ...
def warmup_cosine_decay_schedule(
    init_value: jax.typing.ArrayLike,
    peak_value: jax.typing.ArrayLike,
    warmup_steps: int,
    decay_steps: int,
    end_value: jax.typing.ArrayLike = 0.0,
    exponent: jax.typing.ArrayLike = 1.0,
) -> Schedule: ...
def piecewise_constant_schedule(
    init_value: jax.typing.ArrayLike, boundaries_and_scales: dict[int, float] | None = None
) -> Schedule: ...
def softmax_cross_entropy_with_integer_labels(
    logits: jax.typing.ArrayLike,
    labels: jax.typing.ArrayLike,
    axis: int | tuple[int, ...] = -1,
    where: jax.typing.ArrayLike | None = None,
) -> jax.Array: ...
