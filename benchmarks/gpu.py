"""A bf16 transformer train step on an accelerator: pytreemod, adapters.linen, flax.linen
and raw JAX.

The model: ``LAYERS`` pre-LN blocks ``x + o(attn(q, k, v of ln1(x)))``, ``x + down(gelu(
up(ln2(x))))`` and a final LayerNorm; float32 parameters, bfloat16 computation (every
Dense/Linear with ``dtype=bfloat16``, LayerNorm statistics in float32), causal
``jax.nn.dot_product_attention`` with ``implementation="cudnn"`` on a GPU (XLA's
otherwise); loss the mean squared error against a fixed target in float32; one step is
loss + gradients + an adam update. The same math in:

- **pytreemod**: ``pm.nn.Linear``/``pm.nn.LayerNorm``, ``pm.jit`` +
  ``pm.value_and_grad(argnums=pm.DiffState(0, "params"))``;
- **adapters.linen** and **flax.linen**: one Linen source (``nn.Dense``,
  ``nn.LayerNorm``), ``jax.jit``, only the import differs;
- **raw JAX**: the Linen parameter dict, hand-written math, ``jax.jit``.

All four start from the same parameters (flax.linen's init, converted), so their losses
agree to bf16 tolerance. Measured per contestant: **step** time (``--steps`` steps
carrying the state, blocking once at the end; median over interleaved rounds),
**dispatch** time (how long a call takes to return: within those rounds, the device
still busy, and with the device idle, the host's own cost per call; medians over calls),
and **compile** time (the first call after ``jax.clear_caches()``: trace, compile and
run; after one untimed compile, which pays the process's one-time costs).

Run on a GPU: ``python -m benchmarks.gpu``; a tiny CPU configuration for tests:
``python -m benchmarks.gpu --tiny``.
"""

import argparse
import contextlib
import dataclasses
import statistics
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any, Literal, cast

import jax
import jax.numpy as jnp
import optax

import pytreemod as pm

BF16 = jnp.bfloat16
EPS = 1e-6


@dataclasses.dataclass(frozen=True)
class Config:
    layers: int = 12
    d_model: int = 768
    heads: int = 12
    seq: int = 1024
    batch: int = 8

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads


TINY = Config(layers=2, d_model=32, heads=4, seq=16, batch=2)


def attention_impl() -> Literal["cudnn"] | None:
    """cuDNN's fused attention on a GPU, XLA's elsewhere."""
    return "cudnn" if jax.default_backend() == "gpu" else None


def _attend(q: jax.Array, k: jax.Array, v: jax.Array, cfg: Config) -> jax.Array:
    split = lambda t: t.reshape(*t.shape[:-1], cfg.heads, cfg.head_dim)
    out = jax.nn.dot_product_attention(
        split(q), split(k), split(v), is_causal=True, implementation=attention_impl()
    )
    return out.reshape(*out.shape[:-2], cfg.d_model)


# ----------------------------------------------------------------------------- Linen source


def make_linen(nn: ModuleType, cfg: Config) -> Any:
    class Block(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            dense = lambda n, name: nn.Dense(n, dtype=BF16, name=name)
            h = nn.LayerNorm(epsilon=EPS, dtype=BF16, name="ln1")(x)
            q, k, v = (dense(cfg.d_model, n)(h) for n in ("q", "k", "v"))
            x = x + dense(cfg.d_model, "o")(_attend(q, k, v, cfg))
            h = nn.LayerNorm(epsilon=EPS, dtype=BF16, name="ln2")(x)
            return x + dense(cfg.d_model, "down")(nn.gelu(dense(4 * cfg.d_model, "up")(h)))

    class Encoder(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            for i in range(cfg.layers):
                x = Block(name=f"block_{i}")(x)
            return nn.LayerNorm(epsilon=EPS, dtype=BF16, name="ln_f")(x)

    return Encoder()


# ----------------------------------------------------------------------------- pytreemod


class PmBlock(pm.Module):
    ln1: pm.nn.LayerNorm
    q: pm.nn.Linear
    k: pm.nn.Linear
    v: pm.nn.Linear
    o: pm.nn.Linear
    ln2: pm.nn.LayerNorm
    up: pm.nn.Linear
    down: pm.nn.Linear
    cfg: Config = pm.field(static=True)

    def __init__(self, cfg: Config, *, key: jax.Array):
        d = cfg.d_model
        ks = iter(jax.random.split(key, 6))
        linear = lambda n_in, n_out: pm.nn.Linear(n_in, n_out, dtype=BF16, key=next(ks))
        self.ln1, self.ln2 = (pm.nn.LayerNorm(d, epsilon=EPS, dtype=BF16) for _ in range(2))
        self.q, self.k, self.v, self.o = (linear(d, d) for _ in range(4))
        self.up, self.down = linear(d, 4 * d), linear(4 * d, d)
        self.cfg = cfg

    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.ln1(x)
        x = x + self.o(_attend(self.q(h), self.k(h), self.v(h), self.cfg))
        return x + self.down(jax.nn.gelu(self.up(self.ln2(x))))


class PmEncoder(pm.Module):
    blocks: tuple[PmBlock, ...]
    ln_f: pm.nn.LayerNorm

    def __init__(self, cfg: Config, *, key: jax.Array):
        self.blocks = tuple(PmBlock(cfg, key=k) for k in jax.random.split(key, cfg.layers))
        self.ln_f = pm.nn.LayerNorm(cfg.d_model, epsilon=EPS, dtype=BF16)

    def __call__(self, x: jax.Array) -> jax.Array:
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x)


def pm_from_linen(cfg: Config, params: dict[str, Any]) -> PmEncoder:
    skeleton = pm.eval_shape(PmEncoder, cfg, key=jax.random.key(0))
    tree = {
        "blocks": {i: params[f"block_{i}"] for i in range(cfg.layers)},
        "ln_f": params["ln_f"],
    }
    return pm.from_variables(skeleton, {"params": tree})


# ----------------------------------------------------------------------------- raw JAX


def _raw_ln(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    x32 = x.astype(jnp.float32)
    mean = jnp.mean(x32, axis=-1, keepdims=True)
    var = jnp.maximum(0.0, jnp.mean(x32 * x32, axis=-1, keepdims=True) - mean * mean)
    y = (x32 - mean) * (jax.lax.rsqrt(var + EPS) * p["scale"]) + p["bias"]
    return y.astype(BF16)


def _raw_dense(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    return x.astype(BF16) @ p["kernel"].astype(BF16) + p["bias"].astype(BF16)


def raw_forward(params: dict[str, Any], x: jax.Array, cfg: Config) -> jax.Array:
    for i in range(cfg.layers):
        p = params[f"block_{i}"]
        h = _raw_ln(p["ln1"], x)
        q, k, v = (_raw_dense(p[n], h) for n in ("q", "k", "v"))
        x = x + _raw_dense(p["o"], _attend(q, k, v, cfg))
        h = _raw_ln(p["ln2"], x)
        x = x + _raw_dense(p["down"], jax.nn.gelu(_raw_dense(p["up"], h)))
    return _raw_ln(params["ln_f"], x)


# ----------------------------------------------------------------------------- steps


def _loss(out: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((out.astype(jnp.float32) - y) ** 2)


def _params_step(
    forward: Callable[[Any, jax.Array], jax.Array], opt: optax.GradientTransformation
) -> Callable[..., Any]:
    def step(params: Any, opt_state: Any, x: jax.Array, y: jax.Array) -> Any:
        loss, grads = jax.value_and_grad(lambda p: _loss(forward(p, x), y))(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step


def _pm_step(opt: optax.GradientTransformation) -> Callable[..., Any]:
    def step(model: Any, opt_state: Any, x: jax.Array, y: jax.Array) -> Any:
        loss_fn = lambda m: _loss(m(x), y)
        loss, grads = pm.value_and_grad(loss_fn, argnums=pm.DiffState(0, "params"))(model)
        structure, params, rest = pm.partition(model, "params")
        updates, opt_state = opt.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return pm.combine(structure, cast(pm.State, params), rest), opt_state, loss

    return step


Contestant = tuple[Callable[[], Callable[..., Any]], Any, Any]  # make jitted step, state, opt


def contestants(cfg: Config) -> tuple[dict[str, Contestant], jax.Array, jax.Array]:
    """Jitted-step factories and initial states of the four implementations, and (x, y)."""
    import flax.linen as flax_nn

    import adapters.linen as adapters_nn

    kx, ky, kp = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(kx, (cfg.batch, cfg.seq, cfg.d_model), jnp.float32)
    y = jax.random.normal(ky, x.shape, jnp.float32)
    opt = optax.adam(1e-3)
    flax_model, adapters_model = make_linen(flax_nn, cfg), make_linen(adapters_nn, cfg)
    params = flax_model.init(kp, x)["params"]
    params = jax.tree.map(jnp.asarray, flax_nn.meta.unbox(params))
    pm_model = pm_from_linen(cfg, params)
    pm_params = pm.partition(pm_model, "params")[1]

    def linen_apply(model: Any) -> Callable[[Any, jax.Array], jax.Array]:
        return lambda p, x: model.apply({"params": p}, x)

    out: dict[str, Contestant] = {
        "pytreemod": (lambda: pm.jit(_pm_step(opt)), pm_model, opt.init(pm_params)),
        "adapters.linen": (
            lambda: jax.jit(_params_step(linen_apply(adapters_model), opt)),
            params,
            opt.init(params),
        ),
        "flax.linen": (
            lambda: jax.jit(_params_step(linen_apply(flax_model), opt)),
            params,
            opt.init(params),
        ),
        "raw JAX": (
            lambda: jax.jit(_params_step(lambda p, x: raw_forward(p, x, cfg), opt)),
            params,
            opt.init(params),
        ),
    }
    return out, x, y


def first_losses(cfg: Config) -> dict[str, float]:
    """The loss of one step of each implementation (they start from the same parameters)."""
    runs, x, y = contestants(cfg)
    return {
        name: float(make()(state, opt_state, x, y)[2])
        for name, (make, state, opt_state) in runs.items()
    }


def measure(cfg: Config, *, steps: int, rounds: int) -> dict[str, dict[str, float]]:
    runs, x, y = contestants(cfg)
    result: dict[str, dict[str, float]] = {name: {} for name in runs}
    steps_fns, states = {}, {}
    failed: dict[str, str] = {}
    # One untimed compile first: the process's one-time costs (the GPU libraries' handles,
    # the autotuning of each matrix shape, kept across `clear_caches`) would otherwise all
    # fall on whichever contestant compiles first.
    with contextlib.suppress(Exception):  # a failing raw step is reported where it is timed
        make, state, opt_state = runs["raw JAX"]
        jax.block_until_ready(make()(state, opt_state, x, y))
    for name, (make, state, opt_state) in runs.items():  # compile time, fresh
        jax.clear_caches()
        step = make()
        start = time.perf_counter()
        try:
            state, opt_state, loss = jax.block_until_ready(step(state, opt_state, x, y))
        except Exception as e:  # one failing contestant must not hide the others' numbers
            failed[name] = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}"
            continue
        result[name]["compile_s"] = time.perf_counter() - start
        result[name]["loss"] = float(loss)
        steps_fns[name], states[name] = step, (state, opt_state)
    for name, step in steps_fns.items():  # `clear_caches` above dropped the earlier ones' programs
        states[name] = jax.block_until_ready(step(*states[name], x, y)[:2])
    step_times: dict[str, list[float]] = {name: [] for name in steps_fns}
    dispatch: dict[str, list[float]] = {name: [] for name in steps_fns}
    idle: dict[str, list[float]] = {name: [] for name in steps_fns}
    for _ in range(rounds):
        for name, step in steps_fns.items():
            state, opt_state = states[name]
            start = time.perf_counter()
            for _ in range(steps):
                t0 = time.perf_counter()
                state, opt_state, loss = step(state, opt_state, x, y)
                dispatch[name].append(time.perf_counter() - t0)
            jax.block_until_ready((state, opt_state))
            step_times[name].append((time.perf_counter() - start) / steps)
            for _ in range(3):  # the host's own cost: a call with the device idle
                t0 = time.perf_counter()
                state, opt_state, loss = step(state, opt_state, x, y)
                idle[name].append(time.perf_counter() - t0)
                jax.block_until_ready((state, opt_state))
            states[name] = (state, opt_state)
    for name in steps_fns:
        result[name]["step_ms"] = statistics.median(step_times[name]) * 1e3
        result[name]["dispatch_us"] = statistics.median(dispatch[name]) * 1e6
        result[name]["idle_us"] = statistics.median(idle[name]) * 1e6
    for name, error in failed.items():
        print(f"{name} failed: {error}")
        del result[name]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tiny", action="store_true", help="a tiny configuration (CPU)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    cfg = TINY if args.tiny else Config()
    res = measure(cfg, steps=args.steps, rounds=args.rounds)
    device = jax.devices()[0]
    print(
        f"Device: {device.device_kind} ({jax.default_backend()}), jax {jax.__version__}; "
        f"attention implementation: {attention_impl() or 'default'}; {cfg}"
    )
    print()
    base = res["raw JAX"]["step_ms"] if "raw JAX" in res else float("nan")
    idle_base = res["raw JAX"]["idle_us"] if "raw JAX" in res else float("nan")
    print(
        "| contestant | step (ms) | ratio to raw | dispatch, device busy (us) "
        "| dispatch, device idle (us) | ratio to raw | compile (s) | loss |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in res.items():
        print(
            f"| {name} | {r['step_ms']:.3f} | {r['step_ms'] / base:.2f}x | "
            f"{r['dispatch_us']:.0f} | {r['idle_us']:.0f} | {r['idle_us'] / idle_base:.2f}x | "
            f"{r['compile_s']:.2f} | {r['loss']:.5f} |"
        )
    print()
    print(
        f"Step: {args.steps} steps per round carrying the state, blocking once, median of "
        f"{args.rounds} interleaved rounds. Dispatch: median time for a call to return, within "
        "those rounds (device busy) and for 3 calls per round made with the device idle. "
        "Compile: the first call after `jax.clear_caches()` (trace + compile + run), after one "
        "untimed compile of the raw JAX step."
    )


if __name__ == "__main__":
    main()
