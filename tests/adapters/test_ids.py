"""adapters.ids: unique, hashable identifiers; a copy is a new identity."""

import copy
import threading

from adapters import ids


def test_ids_are_unique_and_hashable() -> None:
    a, b = ids.uuid(), ids.uuid()
    assert a == a and a != b
    assert hash(a) != hash(b)
    assert len({a, b, a}) == 2
    assert a != a.id  # only another FlaxId can be equal
    assert repr(a) == f"FlaxId({a.id})"


def test_copies_get_new_ids() -> None:
    a = ids.uuid()
    for c in (copy.copy(a), copy.deepcopy(a)):
        assert c != a and hash(c) != hash(a)


def test_ids_are_unique_across_threads() -> None:
    drawn: list[ids.FlaxId] = []
    lock = threading.Lock()

    def draw() -> None:
        mine = [ids.uuid() for _ in range(500)]
        with lock:
            drawn.extend(mine)

    threads = [threading.Thread(target=draw) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(drawn)) == 2000
