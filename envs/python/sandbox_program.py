"""The program side of python-code's in-sandbox test runner (`sandbox_runner.py` is the
verifier's side), and the wire both sides speak: length-prefixed JSON messages and a tagged
encoding of values that decodes into exact builtin types only.

The verifier reads this file once, after it has made itself undumpable and read its spec,
uses it for the wire, and starts the program server from that text in memory: `python3 -I -c
SOURCE program` (so nothing the program may rewrite on disk is loaded later). The server
runs the setup code and program.py, then answers the verifier's requests (see
`sandbox_runner`). Standard library only (the sandbox's python3, 3.8 or newer).
"""

import builtins
import json
import os
import select
import struct
import sys
import time

MAX_MESSAGE = 8 << 20  # bytes: the largest reply the verifier decodes
MAX_DEPTH = 200  # nesting of a value; deeper values are refused (both directions)
_REASON = 200
_INT_JSON = 1 << 53  # ints beyond this travel as hex (no decimal digit limit, no precision loss)


# ------------------------------------------------------------------------ framing
def write_msg(fd, obj):
    body = json.dumps(obj, separators=(",", ":")).encode("utf-8", "surrogatepass")
    data = struct.pack(">I", len(body)) + body
    while data:
        n = os.write(fd, data)
        data = data[n:]


def _read_exact(fd, n, deadline):
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0:
                raise Timeout()
            if not select.select([fd], [], [], wait)[0]:
                continue
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise EOFError()
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_msg(fd, deadline=None, limit=MAX_MESSAGE):
    (size,) = struct.unpack(">I", _read_exact(fd, 4, deadline))
    if size > limit:
        raise TooLarge(size)
    return json.loads(_read_exact(fd, size, deadline).decode("utf-8", "surrogatepass"))


class Timeout(BaseException):
    """A test's time is up (raised by the alarm, or by a read past its deadline)."""


class TooLarge(Exception):
    pass


# ------------------------------------------------------------------------ values
# Scalars travel as JSON (None, bool, int up to 2**53, float incl. NaN/Infinity, str) and a
# list as a JSON array; everything else as a one-key object: {"t": [..]} tuple, {"s": [..]}
# set, {"f": [..]} frozenset, {"d": [[k, v], ..]} dict, {"b": hex} bytes, {"y": hex}
# bytearray, {"c": [re, im]} complex, {"i": hex} a big int, {"r": n} a handle to an object
# kept by the program server, {"g": name} one of the program's names.

def encode(v, ref, depth=0):
    """The wire form of `v`; `ref(obj)` encodes what is not plain data (or raises)."""
    if depth > MAX_DEPTH:
        raise ValueError("the value is nested too deeply")
    if v is None or isinstance(v, (bool, str)):
        return str.__str__(v) if isinstance(v, str) else v
    if isinstance(v, int):
        v = int.__int__(v)
        return v if -_INT_JSON < v < _INT_JSON else {"i": hex(v)}
    if isinstance(v, float):
        return float.__float__(v)
    d = depth + 1
    if isinstance(v, (list, tuple)):
        items = [encode(x, ref, d) for x in (list.__iter__(v) if isinstance(v, list)
                                            else tuple.__iter__(v))]
        return items if isinstance(v, list) else {"t": items}
    if isinstance(v, dict):
        return {"d": [[encode(k, ref, d), encode(x, ref, d)]
                      for k, x in dict.items(v)]}
    if isinstance(v, frozenset):
        return {"f": [encode(x, ref, d) for x in frozenset.__iter__(v)]}
    if isinstance(v, set):
        return {"s": [encode(x, ref, d) for x in set.__iter__(v)]}
    if isinstance(v, bytes):
        return {"b": bytes.hex(v)}
    if isinstance(v, bytearray):
        return {"y": bytearray.hex(v)}
    if isinstance(v, complex):
        return {"c": [complex.real.__get__(v), complex.imag.__get__(v)]}
    return ref(v)


def decode(x, handle, depth=0):
    """Exact builtin values from the wire form; `handle(kind, key)` makes what {"r"}/{"g"}
    stand for. Anything malformed raises ValueError."""
    if depth > MAX_DEPTH:
        raise ValueError("the value is nested too deeply")
    t = type(x)
    if x is None or t is bool or t is int or t is float or t is str:
        return x
    d = depth + 1
    if t is list:
        return [decode(e, handle, d) for e in x]
    if t is not dict or len(x) != 1:
        raise ValueError("malformed value")
    ((tag, v),) = x.items()
    if tag in ("t", "s", "f") and type(v) is list:
        items = [decode(e, handle, d) for e in v]
        return tuple(items) if tag == "t" else set(items) if tag == "s" else frozenset(items)
    if tag == "d" and type(v) is list:
        out = {}
        for pair in v:
            if type(pair) is not list or len(pair) != 2:
                raise ValueError("malformed dict")
            out[decode(pair[0], handle, d)] = decode(pair[1], handle, d)
        return out
    if tag in ("b", "y") and type(v) is str:
        return bytes.fromhex(v) if tag == "b" else bytearray.fromhex(v)
    if tag == "c" and type(v) is list and len(v) == 2 and all(type(e) is float for e in v):
        return complex(v[0], v[1])
    if tag == "i" and type(v) is str:
        return int(v, 16)
    if tag in ("r", "g"):
        return handle(tag, v)
    raise ValueError("malformed value")


def reason(e, limit):
    if isinstance(e, Timeout):
        return f"timed out after {limit:g}s"
    try:
        name, msg = type(e).__name__, str(e)
    except BaseException:
        return "unprintable exception"
    if isinstance(e, SystemExit):
        return f"SystemExit({msg}): the program exited"
    if isinstance(e, ProgramFailed):
        return msg[:_REASON]
    return (name + (": " + msg if msg else ""))[:_REASON]


# ------------------------------------------------------------------------ program server
def serve_program():
    """Run setup + program.py, then answer requests until the verifier goes away."""
    rfd, wfd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)  # the program's prints must not reach the reply pipe
    os.close(null)
    objects, ids = [], {}

    def ref(obj):
        key = id(obj)
        if key not in ids:
            ids[key] = len(objects)
            objects.append(obj)  # kept alive: its id stays unique
        return {"r": ids[key]}

    ns = {"__name__": "solution", "__builtins__": builtins}

    def resolve(kind, key):
        if kind == "r" and type(key) is int and 0 <= key < len(objects):
            return objects[key]
        if kind == "g" and type(key) is str and key in ns:
            return ns[key]
        raise ValueError("unknown object")

    def reply(fn):
        try:
            value = fn()
            return {"ok": encode(value, ref)}
        except StopIteration:
            return {"stop": True}
        except BaseException as e:  # SystemExit in a function fails too
            return {"err": [type(e).__name__, reason(e, 0)]}

    write_msg(wfd, {"hello": True})  # started: the load's clock starts now
    req = read_msg(rfd)
    loaded = reply(lambda: _load(ns, req.get("setup") or ""))
    if "ok" in loaded:
        loaded["names"] = _names(ns, ref)
    write_msg(wfd, loaded)
    while True:
        try:
            req = read_msg(rfd)
        except (EOFError, OSError, ValueError):
            os._exit(0)
        write_msg(wfd, _answer(req, resolve, reply))


def _load(ns, setup):
    exec(compile(setup, "<setup>", "exec"), ns)
    with open("program.py", "rb") as f:
        exec(compile(f.read(), "program.py", "exec"), ns)


def _names(ns, ref):
    """What the tests may use of the program's namespace (builtins excluded: the verifier
    keeps its own), each as ["call"], ["module", name] or ["value", wire form]."""
    out = {}
    for name, v in list(ns.items()):
        if name.startswith("__") or not isinstance(name, str):
            continue
        if type(v).__name__ == "module":
            out[name] = ["module", getattr(v, "__name__", "")]
        elif callable(v):
            out[name] = ["call"]
        else:
            try:
                out[name] = ["value", encode(v, ref)]
            except BaseException:
                continue
    return out


def _answer(req, resolve, reply):
    def run():
        def dec(x):
            return decode(x, resolve)

        op = req.get("op")
        if op == "call":
            return dec(req["f"])(*dec(req["a"]), **dec(req["k"]))
        obj = dec(req.get("o"))
        if op == "getattr":
            return getattr(obj, str(req["name"]))
        if op in _UNARY:
            return _UNARY[op](obj)
        if op == "getitem":
            return obj[dec(req["k"])]
        if op == "contains":
            return dec(req["k"]) in obj
        raise ValueError(f"unknown request {op!r}")

    return reply(run)


_UNARY = {"iter": iter, "next": next, "len": len, "bool": bool, "str": str, "repr": repr}


class ProgramFailed(Exception):
    """The program's process died, timed out or answered nonsense during a test."""


if __name__ == "__main__" and sys.argv[1:] == ["program"]:
    serve_program()
