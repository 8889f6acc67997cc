"""``adapters.training.early_stopping``: stop training when a metric stops improving."""

import math

from .. import struct

__all__ = ["EarlyStopping"]


class EarlyStopping(struct.PyTreeNode):
    """Tracks a metric to minimise; ``should_stop`` turns on after too many calls without
    improvement.

    ``update(metric)`` returns a new instance: an improvement (the first metric, or one
    below ``best_metric`` by more than ``min_delta``) records it and resets the count;
    otherwise the count grows, and ``should_stop`` becomes true on the call after
    ``patience`` calls without improvement.

    Attributes:
      min_delta: how much lower than ``best_metric`` a metric must be to improve.
      patience: calls without improvement tolerated before stopping.
      best_metric: the best metric so far (``inf`` before the first update).
      patience_count: calls since the last improvement.
      should_stop: whether training should stop.
      has_improved: whether the last ``update`` improved.
    """

    min_delta: float = 0
    patience: int = 0
    best_metric: float = float("inf")
    patience_count: int = 0
    should_stop: bool = False
    has_improved: bool = False

    def reset(self) -> "EarlyStopping":
        """The same settings with the tracking state cleared."""
        return self.replace(
            best_metric=float("inf"), patience_count=0, should_stop=False, has_improved=False
        )

    def update(self, metric: float) -> "EarlyStopping":
        """The state after observing ``metric``."""
        if math.isinf(self.best_metric) or self.best_metric - metric > self.min_delta:
            return self.replace(best_metric=metric, patience_count=0, has_improved=True)
        return self.replace(
            patience_count=self.patience_count + 1,
            should_stop=self.should_stop or self.patience_count >= self.patience,
            has_improved=False,
        )
