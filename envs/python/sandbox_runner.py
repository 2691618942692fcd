"""python-code's in-sandbox test runner for tests written in Python (MBPP asserts, HumanEval
check functions): the tests and the program run in two processes, and only plain data
crosses between them.

`python3 -I sandbox_runner.py` is the *verifier*. It makes itself undumpable (a process of the same
uid can then neither ptrace it, read its memory nor open its fds), reads a nonce and the spec
(tests, setup code, time limits) from stdin, and only then starts the *program server*: the
source of sandbox_program.py (beside this file, read once at that point, which is also where
the verifier takes the wire from), run as `python3 -I -c SOURCE program` in a new session,
with empty stdin, its stdout on stderr, and the request/reply pipes on private descriptors.
The server runs the
setup code and program.py, then answers the verifier's requests: call a program function,
get an attribute of, iterate over or take the length of an object it returned. Values come
back in a tagged JSON format and are decoded into exact builtin types (int, float, str,
bytes, list, tuple, dict, set, ...); anything else stays in the server and is represented
here by an opaque handle that compares equal only to itself. So:
- the test code runs in the verifier with its own builtins, setup names and check function:
  the program can neither patch them, jump over an assert, nor rewrite the test list;
- a return value cannot bring code along (no rigged `__eq__`): only data is decoded;
- the nonce and the hidden tests exist only in the verifier's memory, and verdict lines go
  to its stdout, which the program has no descriptor for; forged lines are not tagged.
The program may kill or stop the verifier; then verdicts go missing, which is a failure.
Standard library only (it runs on the sandbox's python3, 3.8 or newer).

Over ~400 lines, for a reason: one job, the verifier's side of a grading the program must not
sway: the server's restarts, the remote handles and the tests' namespace each close a hole
the others rely on being closed, so they are read together.
"""

import builtins
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import types

TAG = "SKYHUB-GRADE"
START_TIMEOUT_S = 60.0  # for the program server's interpreter to start (not the program)
#: the program side and the wire (sandbox_program.py beside this file), loaded by `verify`
wire = None


class _Server:
    """The program server's process, restarted (program reloaded) after it dies."""

    def __init__(self, source, setup, limit):
        self.source, self.setup, self.limit = source, setup, limit
        self.proc = None
        self.gen = 0
        self.names = None
        self.load_error = None

    def start(self):
        """Start and load the program; False (with `load_error`) when that fails."""
        self.stop()
        self.gen += 1
        rfd, child_w = os.pipe()
        child_r, wfd = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-c", self.source, "program"], stdin=child_r,
                stdout=child_w, close_fds=True, start_new_session=True)
        except OSError as e:  # e.g. the program's processes fill the pid limit
            for fd in (rfd, wfd):
                os.close(fd)
            self.load_error = f"cannot start the program's process: {e}"
            return False
        finally:
            os.close(child_r)
            os.close(child_w)
        self.rfd, self.wfd = rfd, wfd
        try:
            wire.read_msg(self.rfd, time.monotonic() + START_TIMEOUT_S)
            wire.write_msg(self.wfd, {"setup": self.setup})
            reply = wire.read_msg(self.rfd, time.monotonic() + self.limit)
        except wire.Timeout:
            self.load_error = f"timed out after {self.limit:g}s"
        except (EOFError, OSError):
            self.load_error = self._death()
        except (ValueError, RecursionError, MemoryError, wire.TooLarge):
            self.load_error = "the program's process answered nonsense"
        else:
            if "ok" in reply and type(reply.get("names")) is dict:
                if self.names is None:
                    self.names = reply["names"]
                return True
            err = reply.get("err")
            self.load_error = str(err[1]) if type(err) is list and len(err) == 2 else \
                "the program's process answered nonsense"
        self.stop()
        return False

    def _death(self):
        code = None
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self.proc.wait(timeout=1)
        if code is None:
            return "the program's process stopped answering"
        if code < 0:
            return f"the program's process was killed by signal {-code}"
        return f"the program's process exited with code {code}"

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        for kill in (lambda: os.killpg(proc.pid, signal.SIGKILL), proc.kill):
            with contextlib.suppress(OSError):
                kill()
        for fd in (self.rfd, self.wfd):
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)

    def request(self, req, gen):
        if gen is not None and gen != self.gen:
            raise wire.ProgramFailed("an object from an earlier run of the program, which has "
                                "since been restarted")
        if not self.alive():
            raise wire.ProgramFailed("the program's process is gone (it died earlier in this test)")
        try:
            wire.write_msg(self.wfd, req)
            reply = wire.read_msg(self.rfd)
        except wire.Timeout:
            self.stop()
            raise
        except wire.TooLarge as e:
            self.stop()
            raise wire.ProgramFailed(f"the program returned a value too large to compare "
                                f"({e.args[0]} bytes)") from None
        except (EOFError, OSError):
            why = self._death()
            self.stop()
            raise wire.ProgramFailed(why) from None
        except (ValueError, RecursionError, MemoryError):
            self.stop()
            raise wire.ProgramFailed("the program's process answered nonsense") from None
        if type(reply) is not dict:
            self.stop()
            raise wire.ProgramFailed("the program's process answered nonsense")
        return reply


class _Remote:
    """An object that stayed in the program server: attribute access, calls, iteration,
    len/bool/str/indexing are asked of the server; it equals only itself."""

    __slots__ = ("_gen", "_key", "_kind", "_srv")

    def __init__(self, srv, gen, kind, key):
        object.__setattr__(self, "_srv", srv)
        object.__setattr__(self, "_gen", gen)
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_key", key)

    def _wire(self):
        return {self._kind: self._key}

    def _ask(self, req):
        srv = self._srv
        reply = srv.request(req, self._gen)
        if "ok" in reply:
            try:
                return wire.decode(reply["ok"], lambda kind, key: _Remote(srv, srv.gen, kind, key))
            except (ValueError, TypeError, RecursionError, MemoryError) as e:
                raise wire.ProgramFailed(f"the program returned a malformed value: {e}") from None
        if reply.get("stop") is True:
            raise StopIteration
        err = reply.get("err")
        if type(err) is list and len(err) == 2 and all(type(e) is str for e in err):
            raise _remote_exception(err[0], err[1])
        raise wire.ProgramFailed("the program's process answered nonsense")

    def __call__(self, *args, **kwargs):
        return self._ask({"op": "call", "f": self._wire(), "a": _arg(list(args)),
                          "k": _arg(kwargs)})

    def __getattr__(self, name):
        return self._ask({"op": "getattr", "o": self._wire(), "name": name})

    def __iter__(self):
        it = self._ask({"op": "iter", "o": self._wire()})
        return it if isinstance(it, _Remote) else iter(it)

    def __next__(self):
        return self._ask({"op": "next", "o": self._wire()})

    def __len__(self):
        return self._ask({"op": "len", "o": self._wire()})

    def __bool__(self):
        return self._ask({"op": "bool", "o": self._wire()}) is True

    def __str__(self):
        return str(self._ask({"op": "str", "o": self._wire()}))

    def __repr__(self):
        return str(self._ask({"op": "repr", "o": self._wire()}))

    def __getitem__(self, key):
        return self._ask({"op": "getitem", "o": self._wire(), "k": _arg(key)})

    def __contains__(self, value):
        return self._ask({"op": "contains", "o": self._wire(), "k": _arg(value)}) is True

    def __eq__(self, other):
        if isinstance(other, _Remote):
            return (self._gen, self._kind, self._key) == (other._gen, other._kind, other._key)
        return NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self):
        return hash((self._gen, self._kind, self._key))

    def __setattr__(self, name, value):
        raise TypeError("objects of the program cannot be changed by the tests")


def _arg(value):
    def ref(obj):
        if isinstance(obj, _Remote):
            return obj._wire()
        raise TypeError(f"cannot pass a {type(obj).__name__} to the program")

    return wire.encode(value, ref)


def _remote_exception(name, message):
    """The program's exception, as the builtin of that name when there is one (so a test's
    `except ValueError` works), else a wire.ProgramFailed; its text is the program's."""
    msg = message.split(": ", 1)[1] if message.startswith(name + ": ") else (
        "" if message == name else message)
    kind = getattr(builtins, name, None)
    if name == "SystemExit":
        return wire.ProgramFailed(message)
    if isinstance(kind, type) and issubclass(kind, Exception) and kind is not StopIteration:
        try:
            return kind(msg) if msg else kind()
        except Exception:
            pass
    return wire.ProgramFailed(message)


def _load_program_side():
    """Read sandbox_program.py (beside this file) once, run it as the module `wire`, and
    return its text: what the program server is started from."""
    global wire
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_program.py")
    with open(path, encoding="utf-8") as f:
        source = f.read()
    wire = types.ModuleType("sandbox_program")
    exec(compile(source, path, "exec"), wire.__dict__)
    return source


def verify():
    protected = _undumpable()
    raw = sys.stdin.buffer.read()
    nonce, _, spec = raw.partition(b"\n")
    nonce = nonce.decode().strip()
    spec = json.loads(spec.decode("utf-8"))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(4300)
    source = _load_program_side()
    out = sys.stdout.buffer

    def emit(text):
        out.write(f"\n{TAG} {nonce} {text}\n".encode("utf-8", "replace"))
        out.flush()

    emit("start")
    if not protected:  # the program could read the nonce out of our memory: no grading
        emit("insecure")
        os._exit(0)
    tests, limit = spec["tests"], float(spec["limit"])
    _preimport(spec)
    budget_end = time.monotonic() + float(spec["budget"])
    srv = _Server(source, spec["setup"], limit)

    def on_alarm(signum, frame):
        raise wire.Timeout()

    signal.signal(signal.SIGALRM, on_alarm)
    ns = None
    for i, src in enumerate(tests):
        if time.monotonic() > budget_end:
            emit(f"{i} fail {json.dumps('not run: the grading ran out of time')}")
            continue
        if not srv.alive() and not srv.start():
            why = "while loading the program: " + str(srv.load_error)
            for j in range(i, len(tests)):
                emit(f"{j} fail {json.dumps(why)}")
            break
        try:
            signal.setitimer(signal.ITIMER_REAL, limit)
            try:
                if ns is None:
                    ns = _namespace(srv, spec)
                exec(compile(src, f"<test {i}>", "exec"), ns)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except BaseException as e:  # a timeout is a BaseException
            if isinstance(e, wire.Timeout):
                srv.stop()  # its reply may still come: never read it as the next one's
            emit(f"{i} fail {json.dumps(wire.reason(e, limit))}")
        else:
            emit(f"{i} pass \"\"")
    srv.stop()
    emit("end")
    os._exit(0)


def _namespace(srv, spec):
    """The tests' namespace: the program's names (stubs calling into the server), then the
    setup code and the check function, whose names win; builtins are our own.

    Modules come by import only, never from the program: a name the tests use that is a
    module's name (`math` in `math.isclose(...)`, which MBPP's tests take from the program's
    `import math`) is that module, imported here, whatever the program bound to it (`math =
    Fake()` whose `isclose` says yes, or `import cmath as math`). The program only chooses
    which module an alias stands for (`import numpy as np`), and that module is imported
    here too (unless it is a conventional alias: `np` is numpy). A name the tests call
    directly (`array(...)`) is the program's function, as are the other names the tests use
    (the functions and values under test)."""
    ns = {"__name__": "tests", "__builtins__": builtins}
    text = "\n".join([spec["setup"], spec["post"], *spec["tests"]])
    mentioned = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
    for name, what in (srv.names or {}).items():
        if type(name) is not str or hasattr(builtins, name) or type(what) is not list:
            continue
        module = _ALIASES.get(name, name)
        if name in mentioned and _importable(module) and not _called(name, text):
            # a module's name: the module itself, unless the program bound it to a module
            # of that name deeper in a package (`import numpy.random as random`)
            if what[:1] == ["module"] and len(what) == 2 and type(what[1]) is str and \
                    what[1].rsplit(".", 1)[-1] == name and _importable(what[1]):
                module = what[1]
            with contextlib.suppress(BaseException):  # one we cannot import stays unknown
                ns[name] = __import__(module, fromlist=["_"])
            continue
        if what[:1] == ["call"]:
            ns[name] = _Remote(srv, None, "g", name)  # a name: valid in every run
        elif what[:1] == ["module"] and len(what) == 2 and _importable(what[1]) and \
                name in mentioned:
            with contextlib.suppress(BaseException):  # one we cannot import stays unknown
                ns[name] = __import__(what[1], fromlist=["_"])
        elif what[:1] == ["value"] and len(what) == 2:
            with contextlib.suppress(ValueError, TypeError, RecursionError, MemoryError):
                ns[name] = wire.decode(what[1], lambda kind, key: _Remote(srv, srv.gen, kind, key))
    exec(compile(spec["setup"], "<setup>", "exec"), ns)
    exec(compile(spec["post"], "<tests>", "exec"), ns)
    return ns


_THIRD_PARTY = frozenset({"numpy", "scipy", "sympy", "pandas"})
#: Aliases that name one module by convention: the tests get that module, never the
#: program's object of that name.
_ALIASES = {"np": "numpy", "pd": "pandas"}


def _called(name, text):
    """Whether the tests call `name(...)` itself (not `x.name(...)`): then it is a function
    of the program's, which a module could not be."""
    return re.search(r"(?<![\w.])" + re.escape(name) + r"\s*\(", text) is not None


def _importable(module):
    """Whether the tests may use the program's import of `module` (the standard library and
    the scientific stack; nothing that acts on import)."""
    if type(module) is not str or not module or module.startswith("_"):
        return False
    top = module.split(".")[0]
    return (top in _THIRD_PARTY or _stdlib(top)) and top not in ("antigravity", "this")


def _stdlib(top):
    std = getattr(sys, "stdlib_module_names", None)  # Python 3.10+
    if std is not None:
        return top in std
    if top in sys.builtin_module_names:
        return True
    try:  # 3.8/3.9: where the module would come from, without importing it
        import importlib.util
        import sysconfig

        origin = getattr(importlib.util.find_spec(top), "origin", None) or ""
        base = sysconfig.get_paths()["stdlib"] + os.sep
    except Exception:
        return False
    return origin.startswith(base) and "-packages" + os.sep not in origin


def _preimport(spec):
    """Import the modules the tests may name (setup, check code and tests: `import random`
    in a check function, `math` taken from the program) before the program runs, so that
    the test code gets them as they were, not as a program that wrote to the sandbox's
    Python left them; a later import is sys.modules' copy."""
    text = "\n".join([spec["setup"], spec["post"], *spec["tests"]])
    for name in sorted(set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))):
        module = _ALIASES.get(name, name)
        if _importable(module):
            with contextlib.suppress(BaseException):  # missing here: the test will say so
                __import__(module)


def _undumpable():
    """PR_SET_DUMPABLE=0, and whether it holds (PR_GET_DUMPABLE says 0)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
        return libc.prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE
    except Exception:
        return False


if __name__ == "__main__":
    verify()
