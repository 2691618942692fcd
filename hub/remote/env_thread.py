"""The one thread a server session's env runs in (`EnvThread`), and the process's wait for
those threads at interpreter exit.

Env calls block, so each session of `skyhub serve` runs its env in a thread of its own: an
env is never called concurrently and always from the same thread. The session (server.py)
awaits each call on its event loop through `submit_async`, and closes the env through
`submit`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

#: Started session threads. At interpreter exit each finishes the calls queued before it
#: (an env's close among them) and is joined, as `concurrent.futures` does for its workers.
_live_threads: weakref.WeakSet[EnvThread] = weakref.WeakSet()
_threads_lock = threading.Lock()
_exiting = False


def _stop_threads_at_exit() -> None:
    global _exiting
    with _threads_lock:
        _exiting = True
        threads = list(_live_threads)
    for t in threads:
        t.jobs.put(None)
    for t in threads:
        if t.thread is not None:
            t.thread.join()


threading._register_atexit(_stop_threads_at_exit)  # before non-daemon threads are joined


class EnvThread:
    """The one thread a session's env runs in: calls run one at a time, in order, always in
    this thread. Started on the first call (a socket that never opens costs no thread); at
    exit the process waits for the calls already queued (an env's close).

    Why not a `ThreadPoolExecutor(1)`: its hand-off per call (a semaphore, a condition, a
    concurrent future chained to an asyncio one) cost about twice the CPU of this queue and
    one `call_soon_threadsafe`, and an env call per step is the server's hot path."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.closed = False

    def _put(self, job: tuple[Callable[[], Any], Any, Any]) -> bool:
        """Queue `job`; False when the thread takes no more calls (shut down, or the
        interpreter is exiting)."""
        if self.closed:
            return False
        with _threads_lock:  # no call queued behind the exit's stop
            if _exiting:
                return False
            if self.thread is None:
                self.thread = threading.Thread(target=self._main, name=self.name)
                self.thread.start()
                _live_threads.add(self)
            self.jobs.put(job)
        return True

    def submit_async(self, loop: asyncio.AbstractEventLoop,
                     fn: Callable[[], Any]) -> asyncio.Future | None:
        """`fn()` in this thread; its outcome on an asyncio future of `loop`. None when the
        thread takes no more calls: the caller runs `fn` itself."""
        fut = loop.create_future()
        return fut if self._put((fn, fut, loop)) else None

    def submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future | None:
        """`fn()` in this thread; its outcome on a `concurrent.futures.Future`. None when the
        thread takes no more calls: the caller runs `fn` itself."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        return fut if self._put((fn, fut, None)) else None

    def started(self) -> bool:
        return self.thread is not None

    def shutdown(self) -> None:
        """No more calls; the thread ends after those queued (without waiting for them)."""
        self.closed = True
        if self.thread is not None:
            self.jobs.put(None)

    def _main(self) -> None:
        try:
            while (job := self.jobs.get()) is not None:
                _run_job(*job)
                del job  # drop the env's result before waiting for the next call
        finally:
            with _threads_lock:
                _live_threads.discard(self)


def _run_job(fn: Callable[[], Any], fut: Any, loop: asyncio.AbstractEventLoop | None) -> None:
    if loop is None:  # a concurrent future (the close): settled in this thread
        if fut.set_running_or_notify_cancel():
            try:
                fut.set_result(fn())
            except BaseException as e:
                fut.set_exception(e)
        return
    try:
        result, error = fn(), None
    except BaseException as e:
        result, error = None, e
    with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits for the result
        loop.call_soon_threadsafe(_settle, fut, result, error)


def _settle(fut: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if fut.done():  # the caller gave up (op timeout, session cancelled)
        return
    if error is None:
        fut.set_result(result)
    elif isinstance(error, StopIteration):  # an asyncio future refuses StopIteration
        fut.set_exception(RuntimeError(f"the env raised StopIteration: {error}"))
    else:
        fut.set_exception(error)
