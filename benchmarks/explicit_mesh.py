"""The train step of a 4-layer transformer, FSDP x tensor parallel on a 2x4 mesh of 8
simulated CPU devices, three ways:

- **pytreemod, Explicit mesh**: ``pm.nn`` layers whose parameters carry logical names
  (heads and MLP over ``model``, ``embed`` over ``data``, norm scales over both), rules
  mapping them onto the mesh, JAX's default mesh (Explicit axes); the model code has no
  ``out_sharding`` and no ``reshard``: the ops derive them (pytreemod/_sharding/_policy.py);
- **raw JAX, Explicit mesh**: the same math on a dict of arrays with the same shardings,
  every ``reshard`` (the FSDP gathers of the kernels, the norm scales) and every
  ``out_sharding=`` of the einsums placed by hand, as a JAX user writes it;
- **pytreemod, Auto mesh**: the pytreemod model on a mesh of Auto axes (XLA's sharding
  propagation decides the layout of every intermediate).

One step: loss (mean squared error against a fixed target) + gradients + an adam update,
``jax.jit`` with no ``in_shardings``/``out_shardings`` (on the Explicit mesh the shardings
are the arrays' types). For each step: the collectives of its optimized HLO (all-gather,
reduce-scatter, all-reduce, all-to-all, collective-permute) and its time per step,
interleaved rounds, best round kept (wall clock and process CPU time).

Run: ``python -m benchmarks.explicit_mesh [--rounds N] [--calls N]`` (prints Markdown).
"""

import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count=8".strip()

import argparse
import collections
import platform
import re
import time
from collections.abc import Callable
from typing import Any, cast

import jax
import jax.numpy as jnp
import optax
from jax.sharding import AxisType, NamedSharding, reshard
from jax.sharding import PartitionSpec as P

import pytreemod as pm
from pytreemod.nn import initializers as init

from ._timing import per_call_us

LAYERS, D, HEADS, SEQ, BATCH = 4, 128, 4, 64, 16
HEAD_DIM, HIDDEN, EPS, LR = D // HEADS, 4 * D, 1e-6, 1e-3
RULES = (
    ("batch", "data"),
    ("heads", "model"),
    ("mlp", "model"),
    ("embed", "data"),
    ("norm", ("data", "model")),
)
COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")
PM_EXPLICIT = "pytreemod, Explicit mesh (no annotations)"
RAW = "raw JAX, Explicit mesh (hand-placed `out_sharding`/`reshard`)"
PM_AUTO = "pytreemod, Auto mesh"

# ----------------------------------------------------------------------------- pytreemod


def _lp(fn: Any, *names: str | None) -> Any:
    return pm.with_logical_partitioning(fn, names)


class Block(pm.Module):
    norm1: pm.nn.RMSNorm
    attn: pm.nn.MultiHeadAttention
    norm2: pm.nn.RMSNorm
    up: pm.nn.Linear
    down: pm.nn.Linear

    def __init__(self, *, key: jax.Array) -> None:
        k1, k2, k3, k4, k5 = jax.random.split(key, 5)
        scale, kernel = _lp(init.ones, "norm"), init.lecun_normal()
        self.norm1 = pm.nn.RMSNorm(D, epsilon=EPS, scale_init=scale, key=k1)
        self.attn = pm.nn.MultiHeadAttention(
            HEADS,
            D,
            kernel_init=_lp(kernel, "embed", "heads", "kv"),
            out_kernel_init=_lp(kernel, "heads", "kv", "embed"),
            use_bias=False,
            key=k2,
        )
        self.norm2 = pm.nn.RMSNorm(D, epsilon=EPS, scale_init=scale, key=k3)
        self.up = pm.nn.Linear(
            D, HIDDEN, use_bias=False, kernel_init=_lp(kernel, "embed", "mlp"), key=k4
        )
        self.down = pm.nn.Linear(
            HIDDEN, D, use_bias=False, kernel_init=_lp(kernel, "mlp", "embed"), key=k5
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.attn(self.norm1(x), deterministic=True)
        return x + self.down(jax.nn.gelu(self.up(self.norm2(x))))


class Encoder(pm.Module):
    blocks: list[Block]
    norm: pm.nn.RMSNorm

    def __init__(self, *, key: jax.Array) -> None:
        keys = jax.random.split(key, LAYERS + 1)
        self.blocks = [Block(key=k) for k in keys[:LAYERS]]
        self.norm = pm.nn.RMSNorm(D, epsilon=EPS, scale_init=_lp(init.ones, "norm"), key=keys[-1])

    def __call__(self, x: jax.Array) -> jax.Array:
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


# ----------------------------------------------------------------------------- raw JAX


def raw_params(model: Encoder) -> dict[str, Any]:
    """The pytreemod model's arrays (with their shardings) as raw JAX's dict."""

    def value(v: Any) -> jax.Array:
        return pm.unbox(v).value

    return {
        "blocks": [
            {
                "norm1": value(b.norm1.scale),
                "q": value(b.attn.query.kernel),
                "k": value(b.attn.key.kernel),
                "v": value(b.attn.value.kernel),
                "o": value(b.attn.out.kernel),
                "norm2": value(b.norm2.scale),
                "up": value(b.up.kernel),
                "down": value(b.down.kernel),
            }
            for b in model.blocks
        ],
        "norm": value(model.norm.scale),
    }


def _rms_norm(x: jax.Array, scale: jax.Array) -> jax.Array:
    """RMSNorm as pm.nn's (Flax's) computes it: the scale multiplies the inverse root
    before the input does."""
    scale = reshard(scale, P(None))  # the scale is split 8 ways: gathered for use
    return x * (jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + EPS) * scale)


def _raw_block(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    """``x`` is ``[batch@data, seq, embed]``; kernels are ``embed@data`` (FSDP) and
    ``heads``/``mlp@model`` (tensor parallel)."""
    h = _rms_norm(x, p["norm1"])
    heads = P("data", None, "model", None)
    q, k, v = (
        jnp.einsum("bsd,dhk->bshk", h, reshard(p[n], P(None, "model", None)), out_sharding=heads)
        for n in "qkv"
    )
    q = q / jnp.sqrt(HEAD_DIM).astype(q.dtype)
    w = jnp.einsum("bqhk,bshk->bhqs", q, k, out_sharding=P("data", "model", None, None))
    w = jax.nn.softmax(w, axis=-1)
    a = jnp.einsum("bhqs,bshk->bqhk", w, v, out_sharding=heads)
    o = reshard(p["o"], P("model", None, None))
    x = x + jnp.einsum("bqhk,hkd->bqd", a, o, out_sharding=P("data", None, None))
    h = _rms_norm(x, p["norm2"])
    up = reshard(p["up"], P(None, "model"))
    h = jax.nn.gelu(jnp.einsum("bsd,dm->bsm", h, up, out_sharding=P("data", None, "model")))
    down = reshard(p["down"], P("model", None))
    return x + jnp.einsum("bsm,md->bsd", h, down, out_sharding=P("data", None, None))


def raw_forward(params: dict[str, Any], x: jax.Array) -> jax.Array:
    for p in params["blocks"]:
        x = _raw_block(p, x)
    return _rms_norm(x, params["norm"])


# ----------------------------------------------------------------------------- steps


def make_step(forward: Callable[[Any, jax.Array], jax.Array]) -> Callable[..., Any]:
    opt = optax.adam(LR)

    @jax.jit
    def step(params: Any, opt_state: Any, x: jax.Array, y: jax.Array) -> Any:
        loss, grads = jax.value_and_grad(lambda p: jnp.mean((forward(p, x) - y) ** 2))(params)
        with jax.numpy_dtype_promotion("standard"):  # optax mixes Python scalars in
            updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step


def collectives(step: Callable[..., Any], *args: Any) -> dict[str, int]:
    """How many of each collective the optimized HLO of ``step(*args)`` has (an async
    pair, ``-start``/``-done``, counted once), and (``"instructions"``) how many
    instructions it has in all."""
    text = cast(Any, step).lower(*args).compile().as_text()
    found = collections.Counter(re.findall(r" ([a-z\-]+?)(?:-start)?\(", text))
    counts = {c: found[c] for c in COLLECTIVES}
    counts["instructions"] = len(re.findall(r"= \S+ [a-z\-]+\(", text))
    return counts


KINDS = {PM_EXPLICIT: AxisType.Explicit, RAW: AxisType.Explicit, PM_AUTO: AxisType.Auto}


def setup(names: tuple[str, ...] = tuple(KINDS)) -> tuple[dict[str, tuple[Any, ...]], float]:
    """name -> (step, parameters, optimizer state, mesh, input, target, collectives) for
    each of ``names``; every contestant starts from the same values. Also the largest
    relative difference between their first losses."""
    model = Encoder(key=jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (BATCH, SEQ, D))
    y = jax.random.normal(jax.random.key(2), (BATCH, SEQ, D))
    opt = optax.adam(LR)
    out: dict[str, Any] = {}
    losses = []
    for name in names:
        kind = KINDS[name]
        mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(kind, kind))
        with pm.logical_axis_rules(RULES), jax.set_mesh(mesh):
            sharded = pm.shard(model, mesh)
            params = raw_params(sharded) if name == RAW else sharded
            forward = raw_forward if name == RAW else (lambda m, x: m(x))
            step = make_step(forward)
            batch = NamedSharding(mesh, P("data"))
            sx, sy = jax.device_put(x, batch), jax.device_put(y, batch)
            opt_state = opt.init(params)
            counts = collectives(step, params, opt_state, sx, sy)
            _, _, loss = step(params, opt_state, sx, sy)
            losses.append(float(loss))
        out[name] = (step, params, opt_state, mesh, sx, sy, counts)
    gap = max(abs(a - losses[0]) / abs(losses[0]) for a in losses)
    return out, gap


def runner(
    step: Callable[..., Any], params: Any, opt_state: Any, mesh: Any, x: Any, y: Any
) -> Callable[[], None]:
    """One step per call, each from the state the last one left, under the mesh and rules
    it was traced with."""
    state = [params, opt_state]

    def run() -> None:
        with pm.logical_axis_rules(RULES), jax.set_mesh(mesh):
            state[0], state[1], loss = step(state[0], state[1], x, y)
        loss.block_until_ready()

    return run


def cpu_ms_per_step(fns: dict[str, Callable[[], object]], *, rounds: int) -> dict[str, float]:
    """Process CPU time (all threads) of one step: min over interleaved rounds."""
    best = {name: float("inf") for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.process_time()
            fn()
            best[name] = min(best[name], (time.process_time() - start) * 1e3)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description="Explicit-mesh train step against raw JAX.")
    parser.add_argument("--rounds", type=int, default=20, help="wall-clock rounds")
    parser.add_argument("--calls", type=int, default=3, help="steps per wall-clock round")
    parser.add_argument("--cpu-rounds", type=int, default=20, help="CPU-time rounds")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    contestants, gap = setup()
    fns: dict[str, Callable[[], object]] = {name: runner(*c[:6]) for name, c in contestants.items()}
    wall = per_call_us(fns, calls=args.calls, rounds=args.rounds)
    cpu = cpu_ms_per_step(fns, rounds=args.cpu_rounds)
    print(
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU(s), {jax.device_count()} "
        f"simulated CPU devices, Python {platform.python_version()}, jax {jax.__version__}, "
        f"load average {load_before:.1f} at the start and {os.getloadavg()[0]:.1f} at the "
        "end (a shared machine)\n"
    )
    print(
        f"Train step (forward + backward + adam) of a {LAYERS}-layer pre-norm transformer "
        f"encoder (RMSNorm, {HEADS} heads, d_model {D}, MLP {HIDDEN} gelu, no biases), seq "
        f"{SEQ}, batch {BATCH}, FSDP x TP on a 2x4 ('data', 'model') mesh. Wall clock: best "
        f"of {args.rounds} interleaved rounds of {args.calls} steps; CPU time (process, all "
        f"threads): best of {args.cpu_rounds} interleaved single steps.\n"
    )
    header = " | ".join(COLLECTIVES)
    print(f"| step | {header} | wall ms / step | vs raw JAX | CPU ms / step | vs raw JAX |")
    print("|---|" + "---:|" * (len(COLLECTIVES) + 4))
    raw_wall, raw_cpu = wall[RAW] / 1e3, cpu[RAW]
    for name, c in contestants.items():
        counts = " | ".join(str(c[6][k]) for k in COLLECTIVES)
        w = wall[name] / 1e3
        print(
            f"| {name} | {counts} | {w:.1f} | **{w / raw_wall:.2f}x** | {cpu[name]:.1f} "
            f"| **{cpu[name] / raw_cpu:.2f}x** |"
        )
    ours, raw = contestants[PM_EXPLICIT][6], contestants[RAW][6]
    same = all(ours[c] == raw[c] for c in COLLECTIVES)
    sizes = ", ".join(
        f"{name.split(' (')[0]} {c[6]['instructions']}" for name, c in contestants.items()
    )
    print(
        f"\nChecks: the three steps' first losses agree within a relative {gap:.1e} (same "
        "initial values and batch). The Explicit-mesh pytreemod step and the hand-annotated "
        "raw JAX step have "
        + ("the same collectives." if same else "different collectives (see the table).")
        + f" Optimized HLO instructions: {sizes}."
        + " After a step every parameter and optimizer moment keeps its sharding (no "
        "`out_shardings` given): "
        + ("yes." if all(_kept(c) for c in contestants.values()) else "NO.")
        + " The 8 simulated devices are threads of one process; on a shared machine they "
        "compete with other jobs for the cores, so CPU time is the steadier measure."
    )


def _kept(contestant: tuple[Any, ...]) -> bool:
    step, params, opt_state, mesh, x, y, _ = contestant
    with pm.logical_axis_rules(RULES), jax.set_mesh(mesh):
        new_params, new_state, _ = step(params, opt_state, x, y)
    before = jax.tree.leaves((params, opt_state))
    after = jax.tree.leaves((new_params, new_state))
    return all(a.sharding.is_equivalent_to(b.sharding, a.ndim) for a, b in zip(after, before))


if __name__ == "__main__":
    main()
