"""Requests as futures, run one at a time on a worker thread, fairly across clients.

The Tinker protocol is asynchronous: every training or sampling request is answered at once
with a request id, and the client polls `retrieve_future` for the result. Here each request
becomes a `Job` in its client's queue (its session); the worker takes one job from each
client with work in turn (round robin), so one client's long queue of samples cannot starve
another's optimizer step. Jobs of one client run in the order they arrived, which is the
order the SDK sends a training client's requests (it waits for each to be accepted before
sending the next).

All model work happens on the worker thread, so nothing else touches the model. A job
records the principal (API key) that submitted it: only that principal may poll its result.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import traceback
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from skyhub.trainer.tinker.exceptions import Unsupported

log = logging.getLogger("skyhub.tinker")
KEEP_RESULTS = 4096  # finished results kept for (re)polling; older ones are forgotten


@dataclass
class Outcome:
    """A finished job: a JSON result, protobuf bytes, or a failure ("user" or "server")."""
    json: dict[str, Any] | None = None
    proto: bytes | None = None
    error: str | None = None
    category: str = "user"


@dataclass
class Job:
    request_id: str
    owner: str
    run: Callable[[], Outcome]
    outcome: Outcome | None = None
    # jobs with the same batch key, queued back to back by one owner, run as one call of
    # `batch_run` (e.g. samples from one sampler become one batched generation)
    batch_key: Any = None
    batch_run: Callable[[list[Job]], list[Outcome]] | None = None
    payload: Any = None
    principal: str = ""  # who may read the outcome
    waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = field(
        default_factory=list)


class Jobs:
    def __init__(self, max_batch: int = 64) -> None:
        self.max_batch = max_batch
        self._lock = threading.Condition()
        self._queues: dict[str, deque[Job]] = {}
        self._turns: deque[str] = deque()  # owners with queued work, in serving order
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._closed = False
        self._thread = threading.Thread(target=self._work, daemon=True,
                                        name="skyhub-tinker-worker")
        self._thread.start()

    def submit(self, owner: str, run: Callable[[], Outcome], *, batch_key: Any = None,
               batch_run: Callable[[list[Job]], list[Outcome]] | None = None,
               payload: Any = None, principal: str = "") -> str:
        job = Job(uuid.uuid4().hex, owner, run, batch_key=batch_key, batch_run=batch_run,
                  payload=payload, principal=principal)
        with self._lock:
            self._jobs[job.request_id] = job
            queue = self._queues.setdefault(owner, deque())
            if not queue:
                self._turns.append(owner)
            queue.append(job)
            self._lock.notify()
        return job.request_id

    def known(self, request_id: str, principal: str | None = None) -> bool:
        """Whether `request_id` is a job this queue remembers (and, given `principal`, one
        that principal submitted: to anyone else it is unknown)."""
        with self._lock:
            job = self._jobs.get(request_id)
            return job is not None and (principal is None or job.principal == principal)

    async def wait(self, request_id: str, timeout: float) -> Outcome | None:
        """The job's outcome, waiting up to `timeout` s for it; None if still running."""
        loop = asyncio.get_running_loop()
        with self._lock:
            job = self._jobs[request_id]
            if job.outcome is not None:
                return job.outcome
            fut: asyncio.Future = loop.create_future()
            job.waiters.append((loop, fut))
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            return None
        return job.outcome

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    # ------------------------------------------------------------------ the worker
    def _next(self) -> list[Job] | None:
        """The next owner's next job, with the jobs queued right behind it that batch with
        it; the owner then goes to the back of the line."""
        with self._lock:
            while not self._turns and not self._closed:
                self._lock.wait()
            if self._closed:
                return None
            owner = self._turns.popleft()
            queue = self._queues[owner]
            jobs = [queue.popleft()]
            key = jobs[0].batch_key
            while (key is not None and queue and queue[0].batch_key == key
                   and len(jobs) < self.max_batch):
                jobs.append(queue.popleft())
            if queue:
                self._turns.append(owner)  # back of the line: the others go first
            else:
                del self._queues[owner]
            return jobs

    def _work(self) -> None:
        while (jobs := self._next()) is not None:
            head = jobs[0]
            if len(jobs) > 1 and head.batch_run is not None:
                outcomes = _guarded(functools.partial(head.batch_run, jobs), head.request_id)
                if isinstance(outcomes, Outcome):  # the whole batch failed
                    outcomes = [outcomes] * len(jobs)
            else:
                outcomes = [_guarded(head.run, head.request_id)]
            for job, outcome in zip(jobs, outcomes, strict=True):
                self._finish(job, outcome)

    def _finish(self, job: Job, outcome: Outcome) -> None:
        with self._lock:
            job.outcome = outcome
            waiters, job.waiters = job.waiters, []
            done = [k for k, j in self._jobs.items() if j.outcome is not None]
            for k in done[:max(0, len(done) - KEEP_RESULTS)]:
                del self._jobs[k]
        for loop, fut in waiters:
            loop.call_soon_threadsafe(_resolve, fut)


def _guarded(run: Callable[[], Any], request_id: str) -> Any:
    """`run()`, with an exception turned into a failed `Outcome`."""
    try:
        return run()
    except Unsupported as e:
        return Outcome(error=str(e), category="user")
    except Exception as e:  # a bug or a broken model: the client sees it as such
        log.error("request %s failed:\n%s", request_id, traceback.format_exc())
        return Outcome(error=f"server error: {type(e).__name__}: {e}", category="server")


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)
