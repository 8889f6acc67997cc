"""Train an MLP on scikit-learn's 8x8 handwritten digits with pytreemod and optax.

What it shows:

- ``Linear`` and ``MLP`` are pytreemod Modules: frozen dataclasses that are PyTrees. The
  weights are ``pm.Param`` (collection ``params``); the activation function is a static
  field, part of the tree structure rather than a leaf.
- ``Constant`` is a Variable subclass, i.e. a new collection (``constants``). The model
  holds the training set's feature mean and standard deviation in it, so it standardises
  its own inputs, and the optimizer never sees those arrays.
- ``pm.partition(model, "params")`` splits the model into its structure, the trainable
  ``params`` and the ``rest`` (the constants); ``pm.combine`` rebuilds it inside the
  jitted train step. optax works on ``params`` directly: it is a plain nested dict.

Run it with ``make demo`` or ``python examples/digits_mlp.py [--epochs N] [--seed S]
[--no-plot]``. It needs no download (the data set ships with scikit-learn), runs in a few
seconds on a CPU, and writes ``digits_mlp_loss.png`` next to this file.
"""

# jaxtyping's shape strings ("batch features") are not forward references:

import argparse
import pathlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, Int
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from tqdm import tqdm

import pytreemod as pm

PLOT_PATH = pathlib.Path(__file__).with_name("digits_mlp_loss.png")


class Constant(pm.Variable[jax.Array], collection="constants"):
    """A fixed, non-trainable array: a new collection, ``constants``.

    ``pm.partition(model, "params")`` leaves it out of the trainable state, so the
    optimizer neither updates it nor keeps moment estimates for it.
    """

    __slots__ = ()


class Linear(pm.Module):
    """An affine map ``x @ weight + bias`` on one example (vectorise with ``jax.vmap``)."""

    weight: pm.Param[jax.Array]
    bias: pm.Param[jax.Array]

    def __init__(self, in_features: int, out_features: int, *, key: jax.Array) -> None:
        init = jax.nn.initializers.he_normal()
        self.weight = pm.Param(init(key, (in_features, out_features)))
        self.bias = pm.Param(jnp.zeros(out_features))

    def __call__(self, x: Float[Array, " in_features"]) -> Float[Array, " out_features"]:
        return x @ self.weight.value + self.bias.value


class MLP(pm.Module):
    """Standardise the input with fixed statistics, then Linear/activation layers.

    The last layer has no activation: it returns one logit per class.
    """

    mean: Constant
    std: Constant
    layers: tuple[Linear, ...]
    activation: Callable[[jax.Array], jax.Array] = pm.field(static=True)

    def __init__(
        self,
        sizes: Sequence[int],
        *,
        mean: jax.Array,
        std: jax.Array,
        activation: Callable[[jax.Array], jax.Array] = jax.nn.relu,
        key: jax.Array,
    ) -> None:
        keys = jax.random.split(key, len(sizes) - 1)
        self.mean = Constant(mean)
        self.std = Constant(std)
        self.layers = tuple(
            Linear(n_in, n_out, key=k) for n_in, n_out, k in zip(sizes[:-1], sizes[1:], keys)
        )
        self.activation = activation

    def __call__(self, x: Float[Array, " features"]) -> Float[Array, " classes"]:
        x = (x - self.mean.value) / self.std.value
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.layers[-1](x)


def loss_fn(
    model: MLP, x: Float[Array, "batch features"], y: Int[Array, " batch"]
) -> Float[Array, ""]:
    """Mean softmax cross-entropy of the model's logits against integer labels."""
    logits = jax.vmap(model)(x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def make_train_step(
    structure: pm.Structure, optimizer: optax.GradientTransformation
) -> Callable[..., tuple[pm.State, optax.OptState, jax.Array]]:
    """A jitted step ``(params, rest, opt_state, x, y) -> (params, opt_state, loss)``.

    Only ``params`` is differentiated and updated; ``rest`` (the constants) goes in and is
    used, but no gradient or optimizer state is ever made for it. ``structure`` is a
    hashable Python object, closed over as a compile-time constant.
    """

    @jax.jit
    def train_step(
        params: pm.State,
        rest: pm.State,
        opt_state: optax.OptState,
        x: jax.Array,
        y: jax.Array,
    ) -> tuple[pm.State, optax.OptState, jax.Array]:
        def params_loss(params: pm.State) -> jax.Array:
            return loss_fn(pm.combine(structure, params, rest), x, y)

        loss, grads = jax.value_and_grad(params_loss)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, opt_state, loss

    return train_step


@jax.jit
def accuracy(model: MLP, x: jax.Array, y: jax.Array) -> jax.Array:
    """Fraction of examples whose highest logit is the true class."""
    predictions = jnp.argmax(jax.vmap(model)(x), axis=-1)
    return jnp.mean(predictions == y)


def load_data(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The digits data set (1797 images of 8x8 pixels, 10 classes), split 80/20."""
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        np.asarray(x, dtype=np.float32),
        np.asarray(y, dtype=np.int32),
        test_size=0.2,
        random_state=seed,
        stratify=y,
    )
    return np.asarray(x_train), np.asarray(x_test), np.asarray(y_train), np.asarray(y_test)


def standardisation(x_train: np.ndarray) -> tuple[jax.Array, jax.Array]:
    """Per-feature mean and standard deviation of the training set.

    Some pixels are always blank in the training images; their deviation is set to one so
    standardising leaves them at zero instead of dividing by zero.
    """
    mean = x_train.mean(axis=0)
    std = x_train.std(axis=0)
    std = np.where(std > 1e-6, std, 1.0).astype(np.float32)
    return jnp.asarray(mean), jnp.asarray(std)


def save_plot(step_losses: Sequence[float], epoch_losses: Sequence[float], path: Any) -> None:
    """Write the per-step and per-epoch training loss to a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps_per_epoch = len(step_losses) / max(len(epoch_losses), 1)
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    ax.plot(np.arange(len(step_losses)), step_losses, alpha=0.35, label="minibatch")
    epoch_ends = (np.arange(len(epoch_losses)) + 1) * steps_per_epoch - 1
    ax.plot(epoch_ends, epoch_losses, marker="o", markersize=3, label="epoch mean")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy loss")
    ax.set_title("pytreemod MLP on sklearn digits")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--epochs", type=int, default=30, help="passes over the training set")
    parser.add_argument("--seed", type=int, default=0, help="seed of the split, init, shuffles")
    parser.add_argument("--batch-size", type=int, default=64, help="examples per step")
    parser.add_argument("--learning-rate", type=float, default=1e-3, help="Adam step size")
    parser.add_argument("--no-plot", action="store_true", help="do not write the loss PNG")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> float:
    """Train, print and return the held-out test accuracy."""
    args = parse_args(argv)
    start = time.perf_counter()
    x_train, x_test, y_train, y_test = load_data(args.seed)
    mean, std = standardisation(x_train)

    init_key, shuffle_key = jax.random.split(jax.random.key(args.seed))
    model = MLP([x_train.shape[1], 128, 128, 10], mean=mean, std=std, key=init_key)
    print(model)

    structure, params, rest = pm.partition(model, "params")
    n_params = sum(leaf.size for leaf in jax.tree.leaves(params))
    n_rest = sum(leaf.size for leaf in jax.tree.leaves(rest))
    print(f"trainable params: {n_params:,} values; not trained (constants): {n_rest:,}")

    optimizer = optax.adam(args.learning_rate)
    opt_state = optimizer.init(params)
    train_step = make_train_step(structure, optimizer)

    x_train_j, y_train_j = jnp.asarray(x_train), jnp.asarray(y_train)
    steps_per_epoch = len(x_train) // args.batch_size  # drop the last partial batch
    step_losses: list[float] = []
    epoch_losses: list[float] = []
    progress = tqdm(range(args.epochs), desc="training", unit="epoch")
    for epoch in progress:
        order = jax.random.permutation(jax.random.fold_in(shuffle_key, epoch), len(x_train))
        batches = order[: steps_per_epoch * args.batch_size].reshape(steps_per_epoch, -1)
        losses = []
        for idx in batches:
            params, opt_state, loss = train_step(
                params, rest, opt_state, x_train_j[idx], y_train_j[idx]
            )
            losses.append(loss)
        epoch_step_losses = [float(loss) for loss in losses]  # one host sync per epoch
        step_losses.extend(epoch_step_losses)
        epoch_losses.append(float(np.mean(epoch_step_losses)))
        progress.set_postfix(loss=f"{epoch_losses[-1]:.4f}")

    model = pm.combine(structure, params, rest)
    test_accuracy = float(accuracy(model, jnp.asarray(x_test), jnp.asarray(y_test)))
    print(f"test accuracy: {test_accuracy:.4f} ({len(x_test)} held-out images)")
    if not args.no_plot:
        save_plot(step_losses, epoch_losses, PLOT_PATH)
        print(f"loss curve: {PLOT_PATH}")
    print(f"total time: {time.perf_counter() - start:.1f} s")
    return test_accuracy


if __name__ == "__main__":
    main()
