"""Values as strict JSON: the one sanitiser every JSON skyhub writes or sends goes through.

`jsonable` turns what JSON cannot carry into something it can (tuples and sets to lists,
numpy scalars to numbers, NaN and infinities to None, non-string keys and other objects to
their `str`), so an info crosses a wire, a Ray/pickle boundary or a file without surprising
the reader; `dumps` writes it with `allow_nan=False` (other JSON parsers refuse NaN).
"""

from __future__ import annotations

import json
import math
from typing import Any


def jsonable(value: Any) -> Any:
    """`value` as plain JSON data (see the module's docstring); JSON data is returned as is,
    except that NaN and infinite floats, at any depth, become None."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        try:
            return jsonable(item())
        except (TypeError, ValueError):
            pass
    return str(value)


def dumps(value: Any, **kwargs: Any) -> str:
    """`json.dumps` of `jsonable(value)` with `allow_nan=False`: every JSON file a run writes
    goes through here."""
    return json.dumps(jsonable(value), allow_nan=False, **kwargs)
