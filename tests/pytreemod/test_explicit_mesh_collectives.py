"""The Explicit-mesh benchmark's claim, on a one-block model: the FSDP x TP train step of
pm.nn layers with logical names only compiles to the collectives of the same model written
in raw JAX with hand-placed ``out_sharding``/``reshard``, and gives the same loss."""

import jax
import pytest

from benchmarks import explicit_mesh as bench


def test_pytreemod_step_has_the_hand_annotated_collectives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bench, "LAYERS", 1)
    with jax.numpy_rank_promotion("allow"):  # the raw JAX norm broadcasts its scale
        steps, gap = bench.setup((bench.PM_EXPLICIT, bench.RAW))
    ours, raw = steps[bench.PM_EXPLICIT][6], steps[bench.RAW][6]
    assert {c: ours[c] for c in bench.COLLECTIVES} == {c: raw[c] for c in bench.COLLECTIVES}
    assert ours["all-gather"] > 0 and ours["all-reduce"] > 0  # FSDP gathers, TP reductions
    assert gap < 1e-5
