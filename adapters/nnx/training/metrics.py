"""``flax.nnx.training.metrics``: metrics accumulated in NNX state.

A metric is an NNX Pytree whose running totals are ``MetricState`` Variables, so it can be
updated in place inside ``nnx.jit`` or split/merged like any graph node. ``update(**kw)``
accumulates a batch, ``compute()`` returns the value so far, ``reset()`` starts over.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ... import struct
from .. import graphlib
from ..pytreelib import Pytree
from ..variablelib import Variable


class MetricState(Variable):
    """A Variable holding a metric's running state."""

    __slots__ = ()


class Metric(Pytree):
    """Base class of metrics: subclasses implement ``__init__``, ``reset``, ``update`` and
    ``compute``."""

    def __init__(self) -> None:
        raise NotImplementedError("Must override `__init__()` method.")

    def reset(self) -> None:
        """Reset the metric in place."""
        raise NotImplementedError("Must override `reset()` method.")

    def update(self, **kwargs: Any) -> None:
        """Accumulate a batch in place."""
        raise NotImplementedError("Must override `update()` method.")

    def compute(self) -> Any:
        """The metric's value so far."""
        raise NotImplementedError("Must override `compute()` method.")

    def split(self, *filters: Any) -> Any:
        """``nnx.split(self, *filters)``."""
        return graphlib.split(self, *filters)


def _argument(kwargs: dict[str, Any], argname: str) -> Any:
    if argname not in kwargs:
        raise TypeError(f"Expected keyword argument '{argname}'")
    return kwargs[argname]


class Average(Metric):
    """The mean of every value seen (``nan`` before the first update).

    ``Average('loss')`` reads ``update(loss=...)``; the default keyword is ``values``.
    """

    def __init__(self, argname: str = "values") -> None:
        self.argname = argname
        self.total = MetricState(jnp.array(0, dtype=jnp.float32))
        self.count = MetricState(jnp.array(0, dtype=jnp.int32))

    def reset(self) -> None:
        """Zero the total and the count."""
        self.total[...] = jnp.array(0, dtype=jnp.float32)
        self.count[...] = jnp.array(0, dtype=jnp.int32)

    def update(self, mask: jax.Array | None = None, **kwargs: Any) -> None:
        """Add ``kwargs[argname]`` (a number counts once, an array counts each element).

        Args:
          mask: optional array broadcastable to the values; the values are weighted by it
            and the count grows by its sum. Only allowed with array values.
          **kwargs: must contain the keyword named by ``argname``.
        """
        values = _argument(kwargs, self.argname)
        scalar = isinstance(values, (int, float))
        if mask is not None and scalar:
            raise ValueError(f"If mask is provided, {self.argname} should be a jax array")
        if scalar:
            self.total[...] = self.total[...] + values
            self.count[...] = self.count[...] + 1
        elif mask is None:
            self.total[...] = self.total[...] + values.sum()
            self.count[...] = self.count[...] + values.size
        else:
            self.total[...] = self.total[...] + (values * mask.astype(values.dtype)).sum()
            self.count[...] = self.count[...] + mask.sum().astype(self.count[...].dtype)

    def compute(self) -> jax.Array:
        """``total / count``."""
        return self.total[...] / self.count[...]


@struct.dataclass
class Statistics:
    """What ``Welford.compute`` returns."""

    mean: Any
    standard_error_of_mean: Any
    standard_deviation: Any


class Welford(Metric):
    """Streaming mean and variance by Welford's algorithm (numerically stable for large
    offsets); ``compute`` returns ``Statistics``."""

    def __init__(self, argname: str = "values") -> None:
        self.argname = argname
        self.count = MetricState(jnp.array(0, dtype=jnp.int32))
        self.mean = MetricState(jnp.array(0, dtype=jnp.float32))
        self.m2 = MetricState(jnp.array(0, dtype=jnp.float32))

    def reset(self) -> None:
        """Zero the count, the mean and the sum of squared deviations."""
        self.count[...] = jnp.array(0, dtype=jnp.uint32)
        self.mean[...] = jnp.array(0, dtype=jnp.float32)
        self.m2[...] = jnp.array(0, dtype=jnp.float32)

    def update(self, **kwargs: Any) -> None:
        """Merge the batch ``kwargs[argname]`` (a number or an array) into the running
        moments (Chan et al.'s pairwise combination)."""
        values = _argument(kwargs, self.argname)
        scalar = isinstance(values, (int, float))
        batch_count = 1 if scalar else values.size
        batch_mean = values if scalar else values.mean()
        batch_m2 = 0.0 if scalar else values.var() * batch_count
        old_count = self.count[...]
        self.count[...] = old_count + batch_count
        new_count = self.count[...]
        delta = batch_mean - self.mean[...]
        self.mean[...] = self.mean[...] + delta * batch_count / new_count
        self.m2[...] = self.m2[...] + batch_m2 + delta * delta * batch_count * old_count / new_count

    def compute(self) -> Statistics:
        """Mean, standard deviation and standard error of the mean so far."""
        count = self.count[...]
        standard_deviation = (self.m2[...] / count) ** 0.5
        return Statistics(
            mean=self.mean[...],
            standard_error_of_mean=standard_deviation / count**0.5,
            standard_deviation=standard_deviation,
        )


_INT_LABELS = (jnp.int64, np.int32, np.int64)


class Accuracy(Average):
    """Fraction of correct predictions.

    Without ``threshold`` (multi-class) the logits are arg-maxed over their last axis;
    with a float ``threshold`` (binary) a logit ``>= threshold`` predicts a positive label.
    """

    def __init__(self, threshold: float | None = None, *args: Any, **kwargs: Any) -> None:
        if threshold is not None and not isinstance(threshold, float):
            raise TypeError(f"Expected threshold to be a float, got {type(threshold)}")
        self.threshold = threshold
        super().__init__(*args, **kwargs)

    def update(  # type: ignore[override]
        self,
        *,
        logits: jax.Array,
        labels: jax.Array,
        mask: jax.Array | None = None,
        **_: Any,
    ) -> None:
        """Count the batch's correct predictions (weighted by ``mask`` if given)."""
        if self.threshold is not None:
            if logits.ndim != labels.ndim:
                raise ValueError(
                    "For binary classification, expected logits.ndim==labels.ndim, got "
                    f"{logits.ndim} and {labels.ndim}"
                )
        elif logits.ndim != labels.ndim + 1:
            raise ValueError(
                "For multi-class classification, expected logits.ndim==labels.ndim+1, "
                f"got {logits.ndim} and {labels.ndim}"
            )
        if labels.dtype in _INT_LABELS:
            labels = jnp.astype(labels, jnp.int32)
        elif labels.dtype != jnp.int32:
            raise ValueError(f"Expected labels.dtype==jnp.int32, got {labels.dtype}")
        if self.threshold is not None:
            correct = (logits >= self.threshold) == (labels > 0)
        else:
            correct = logits.argmax(axis=-1) == labels
        super().update(values=correct, mask=mask)


class MultiMetric(Metric):
    """Several metrics updated together: ``MultiMetric(loss=Average(), acc=Accuracy())``.

    ``update(**kw)`` passes every keyword to every metric; ``mask`` may be one array for
    all of them or a dict from metric name to its mask. ``compute()`` returns a dict in the
    order the metrics were given.
    """

    def __init__(self, **metrics: Metric) -> None:
        self._metric_names = tuple(metrics)
        for name, metric in metrics.items():
            setattr(self, name, metric)

    def reset(self) -> None:
        """Reset every metric."""
        for name in self._metric_names:
            getattr(self, name).reset()

    def update(self, **updates: Any) -> None:
        """Update every metric with ``updates`` (see the class docstring for ``mask``)."""
        mask = updates.pop("mask", None)
        for name in self._metric_names:
            own_mask = mask.get(name) if isinstance(mask, dict) else mask
            extra = {} if own_mask is None else {"mask": own_mask}
            getattr(self, name).update(**updates, **extra)

    def compute(self) -> dict[str, Any]:
        """``{name: metric.compute()}``."""
        return {name: getattr(self, name).compute() for name in self._metric_names}
