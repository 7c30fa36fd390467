"""Remembering a costly pure function's last results within one process.

Drawing the figures (matplotlib, about a second; bundle.views.figures), the verifier's scoring
of the estimators on every bootstrap resample (verify/estimators.py) and a document's validation
against a schema (bundle/schemas.py, verify/schemacheck.py: jsonschema, tens of milliseconds a
document) are pure functions of records. A process that writes or checks many bundles made from
the same records (the verifier after the writer in `job cosign`, an archive and its folder, a
sweep verified again after one member changed, a test suite's tamper cases) draws, scores and
validates each set of records once. The writer and the verifier keep their verdicts apart: each
validates with its own validator and remembers only its own.

The key is the SHA-256 of the arguments' exact contents: each array's dtype, shape and bytes, and
every other value pickled, which keeps types and float bits apart (1 and 1.0, 0.0 and -0.0, "1" and
1 give different keys). Equal keys therefore mean equal inputs, and a pure function's result
can be handed back. Nothing is kept on disk or between processes: a verification never trusts
what another process computed. The results are immutable (bytes, or a deep copy of a record)."""

from __future__ import annotations

import copy
import functools
import hashlib
import pickle
import sys
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

__all__ = ["SIZE", "key_of", "memoized"]

SIZE = 32
"""Results kept per function, the least recently used dropped first. A set of figures is about
85 KB of PNG and an estimators record a few KB, so 32 of each stay under 3 MB; with 8, the processes of
`make test` drew 13 sets of figures a second time after dropping them (about 17 s of drawing)."""

P = ParamSpec("P")
R = TypeVar("R")


def _feed(h: Any, value: Any) -> None:
    # numpy is looked up, not imported: without it loaded no value is an array, and the schemas'
    # validation (bundle.schemas) is memoized without pulling numpy into the format's definitions.
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.ndarray):
        h.update(b"A" + pickle.dumps((value.dtype.str, value.shape)))
        h.update(np.ascontiguousarray(value).tobytes())
    else:
        data = pickle.dumps(value, protocol=5)
        h.update(b"P" + len(data).to_bytes(8, "big") + data)


def key_of(*args: Any, **kwargs: Any) -> bytes:
    """The SHA-256 of the arguments' exact contents (arrays by dtype, shape and bytes)."""
    h = hashlib.sha256()
    for value in args:
        _feed(h, value)
    for name in sorted(kwargs):
        _feed(h, name)
        _feed(h, kwargs[name])
    return h.digest()


def memoized(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn`, answering a call whose arguments have the key of one of the last SIZE calls with a
    deep copy of that call's result. `fn` must be pure: its result depends only on its arguments."""
    kept: OrderedDict[bytes, R] = OrderedDict()

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        key = key_of(*args, **kwargs)
        if key in kept:
            kept.move_to_end(key)
            return copy.deepcopy(kept[key])
        result = fn(*args, **kwargs)
        kept[key] = copy.deepcopy(result)
        while len(kept) > SIZE:
            kept.popitem(last=False)
        return result

    return call
