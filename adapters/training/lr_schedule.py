"""``adapters.training.lr_schedule``: the learning-rate schedules of Flax's old examples.

Flax considers these effectively deprecated in favour of optax's schedules
(``optax.warmup_cosine_decay_schedule``, ``optax.piecewise_constant_schedule``...); each
constructor logs a warning saying so. Each returns ``f(step) -> learning rate``; a
``warmup_length`` (in epochs) above zero multiplies the rate by a factor rising linearly
from 0 to 1 over the first ``warmup_length * steps_per_epoch`` steps.
"""

import logging
from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

__all__ = [
    "create_constant_learning_rate_schedule",
    "create_cosine_learning_rate_schedule",
    "create_stepped_learning_rate_schedule",
]

_logger = logging.getLogger("adapters.training.lr_schedule")
Schedule = Callable[[Any], Any]


def _warn() -> None:
    _logger.warning(
        "Learning rate schedules in ``flax.training`` are effectively deprecated in favor "
        "of Optax schedules. Please refer to "
        "https://optax.readthedocs.io/en/latest/api.html#optimizer-schedules for "
        "alternatives."
    )


def _with_warmup(lr: Any, step: Any, warmup_length: float, steps_per_epoch: int) -> Any:
    if warmup_length > 0.0:
        lr = lr * jnp.minimum(1.0, step / float(warmup_length) / steps_per_epoch)
    return lr


def create_constant_learning_rate_schedule(
    base_learning_rate: float, steps_per_epoch: int, warmup_length: float = 0.0
) -> Schedule:
    """``base_learning_rate`` at every step (after the optional warmup)."""
    _warn()
    return lambda step: _with_warmup(base_learning_rate, step, warmup_length, steps_per_epoch)


def create_stepped_learning_rate_schedule(
    base_learning_rate: float,
    steps_per_epoch: int,
    lr_sched_steps: Sequence[Sequence[float]],
    warmup_length: float = 0.0,
) -> Schedule:
    """``base_learning_rate`` times the factor of the last ``[epoch, factor]`` pair of
    ``lr_sched_steps`` whose epoch has been passed (1 before the first)."""
    _warn()
    boundaries = np.round(np.array([s[0] for s in lr_sched_steps]) * steps_per_epoch)
    boundaries = boundaries.astype(int)
    values = np.array([1.0] + [s[1] for s in lr_sched_steps]) * base_learning_rate

    def schedule(step: Any) -> Any:
        lr = jnp.take(values, jnp.sum(boundaries < step))
        return _with_warmup(lr, step, warmup_length, steps_per_epoch)

    return schedule


def create_cosine_learning_rate_schedule(
    base_learning_rate: float,
    steps_per_epoch: int,
    halfcos_epochs: float,
    warmup_length: float = 0.0,
) -> Schedule:
    """``base_learning_rate`` times half a cosine wave, from 1 at step 0 to 0 after
    ``halfcos_epochs`` epochs."""
    _warn()
    half_wave = halfcos_epochs * steps_per_epoch

    def schedule(step: Any) -> Any:
        lr = base_learning_rate * (jnp.cos(step * jnp.pi / half_wave) * 0.5 + 0.5)
        return _with_warmup(lr, step, warmup_length, steps_per_epoch)

    return schedule
