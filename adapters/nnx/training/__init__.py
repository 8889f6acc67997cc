"""``flax.nnx.training``: optimizer, metrics and EMA for NNX models.

``optimizer`` (``Optimizer``, ``ModelAndOptimizer``, ``OptState``...), ``metrics``
(``Average``, ``Accuracy``, ``Welford``, ``MultiMetric``...) and ``ema`` (``EMA``) are
its submodules; ``adapters.nnx`` re-exports their public names.
"""
