"""One private event loop thread, and the one bridge from sync code into it.

Inside a Jupyter kernel the kernel's own loop is busy while a cell runs, so
MCP sessions, kernel clients and every async tool live on this loop instead.
Async code is written once; sync callers (the shell builtin, magics, the
Python API) go through `run()`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import sys
import threading
import time
from typing import Any, Callable, Coroutine, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None


def get_loop() -> asyncio.AbstractEventLoop:
    global _loop, _thread
    with _lock:
        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
            _thread = threading.Thread(target=_loop.run_forever, name="toolkernel-loop", daemon=True)
            _thread.start()
        return _loop


def stop(timeout: float = 10) -> None:
    """Cancel what runs on the private loop, stop it and end its thread (the extension
    is unloaded); the next `run()` starts a fresh one. The idle loops of other threads
    are closed too (Bashkit's threads never end)."""
    global _loop, _thread
    _close_idle_thread_loops()
    with _lock:
        loop, thread, _loop, _thread = _loop, _thread, None, None
    if loop is None or loop.is_closed():
        return
    try:
        asyncio.run_coroutine_threadsafe(_cancel_all(), loop).result(timeout)
    except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
        pass  # stopped below all the same; what did not end is dropped with the loop
    loop.call_soon_threadsafe(loop.stop)
    if thread is not None:
        thread.join(timeout)
    if not loop.is_running():
        loop.close()


async def _cancel_all() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Start `coro` on the private loop; the future can be waited on or cancelled."""
    loop = get_loop()
    if _on_loop_thread(loop):
        raise RuntimeError("toolkernel.run() called from its own event loop thread")
    return asyncio.run_coroutine_threadsafe(coro, loop)


def run(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run `coro` on the private loop and wait for its result.

    Waits in short slices so a KeyboardInterrupt (kernel interrupt) reaches
    the waiting thread; the coroutine is then cancelled and the interrupt
    re-raised.
    """
    future = submit(coro)
    try:
        return wait(future, timeout)
    except BaseException:
        future.cancel()
        raise


async def on_private(coro: Coroutine[Any, Any, T]) -> T:
    """Await `coro` on the private loop, from a coroutine on any loop (in place when on it)."""
    if on_private_loop():
        return await coro
    return await asyncio.wrap_future(submit(coro))


def wait(future: concurrent.futures.Future[T], timeout: float | None = None) -> T:
    # The wait happens in SimpleQueue's C code, not in the future's Python Condition:
    # a KeyboardInterrupt landing inside `with condition:` can leave that lock held
    # (a known CPython race), and the loop thread would then hang setting the result.
    done: queue.SimpleQueue = queue.SimpleQueue()
    future.add_done_callback(done.put)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        slice_ = 0.1 if deadline is None else max(0.0, min(0.1, deadline - time.monotonic()))
        try:
            return done.get(timeout=slice_).result()
        except queue.Empty:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("timed out") from None


def on_private_loop() -> bool:
    """True when called from a coroutine running on toolkernel's private loop."""
    return _loop is not None and _on_loop_thread(_loop)


def may_block() -> bool:
    """Whether sync work may run in place on the loop running here: not on the private loop
    (it serves every MCP session) nor on a loop marked `keep_free` (the loop of a script
    that hands the script's output on while a call runs: see _runners/_bashkit.py)."""
    loop = asyncio._get_running_loop()
    return loop is None or not (loop is _loop or getattr(loop, "keep_free", False))


# Each thread's own loop, keyed by the OS thread and not kept in a `threading.local`: a
# thread that Python did not start (Bashkit's tokio workers, which call a sync builtin
# under the async `execute`) gets a fresh Python thread state on every call, so a
# thread-local was empty each time, and every `tools` call made a new loop (a selector
# and a self-pipe) and dropped the last one unclosed. A loop outlives its thread only
# until a thread with the same id takes it over, so there are never more of them than
# threads alive at once; they are closed by `close_here` (threads of ours, when they
# end) or by `stop` (Bashkit's, which live as long as the process).
_thread_loops: dict[int, asyncio.AbstractEventLoop] = {}


def _thread_loop() -> asyncio.AbstractEventLoop:
    ident = threading.get_ident()
    loop = _thread_loops.get(ident)
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        with _lock:
            _thread_loops[ident] = loop
    return loop


def own_loop() -> asyncio.AbstractEventLoop:
    """This thread's own loop: the one `local_task`, `run_here` and `run_in_place` run."""
    return _thread_loop()


def local_task(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """A task on this thread's own loop, to be run by `run_here` (and cancelled by `cancel`)."""
    return _thread_loop().create_task(coro)


def run_here(task: asyncio.Task[T]) -> T:
    """Run a `local_task` to the end on this thread's own loop (no thread hand-off).

    For work bound to nothing on the private loop. Each thread keeps one
    loop, so repeated calls (a `tools` builtin in a shell loop) stay cheap.
    """
    return task.get_loop().run_until_complete(task)


def free_here() -> bool:
    """Whether `run_in_place` may run work on this thread now: not while this thread's own
    loop already runs (a call made by a hook of a call) nor on the private loop, and, from
    Python 3.14 on (one running task per thread across loops), not under a running task."""
    outer = asyncio._get_running_loop()
    if outer is None:
        return True
    if outer is _thread_loops.get(threading.get_ident()) or outer is _loop:
        return False
    return sys.version_info < (3, 14) or asyncio.current_task(outer) is None


def run_in_place(coro: Coroutine[Any, Any, T], grace: float = 2.0) -> T:
    """Run `coro` on this thread's own loop with no thread hand-off, where `free_here()`.

    A loop running on this thread already (the kernel's, while a cell runs) is blocked in
    this very frame, so it is set aside for the run and put back after. A KeyboardInterrupt
    (kernel interrupt) cancels the work, gives it `grace` seconds to end, and is re-raised.
    """
    task = local_task(coro)
    outer = asyncio._get_running_loop()
    asyncio._set_running_loop(None)
    stop_waking = _wake_for_signals(task)
    try:
        return run_here(task)
    except BaseException:
        if task.done():
            task.cancelled() or task.exception()  # raised through here: not "never retrieved"
        else:
            task.cancel()
            task.get_loop().run_until_complete(asyncio.wait([task], timeout=grace))
        raise
    finally:
        stop_waking()
        asyncio._set_running_loop(outer)


def _wake_for_signals(task: asyncio.Task[Any], every: float = 0.1) -> Callable[[], None]:
    """On the main thread, wake `task`'s loop every `every` seconds while the task waits. A
    signal (a kernel interrupt) may be taken by any thread, and Python runs its handler on the
    main thread only once that thread runs code again: without a wake it would wait out the
    loop's sleep. Armed after the task's first step: most direct calls never wait, and a timer
    set and cancelled on every call was a tenth of a call's cost."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop = task.get_loop()

    def tick() -> None:
        nonlocal handle
        handle = loop.call_later(every, tick)

    def arm() -> None:
        if not task.done():
            tick()

    handle: asyncio.Handle = loop.call_soon(arm)  # runs right after the task's first step
    return lambda: handle.cancel()


def close_here() -> None:
    """Close this thread's own loop, if it has one (a thread that ends calls this)."""
    with _lock:
        loop = _thread_loops.pop(threading.get_ident(), None)
    if loop is not None:
        _close(loop)


def _close(loop: asyncio.AbstractEventLoop) -> None:
    if loop.is_closed():
        return
    # Finishing its async generators means running it, which a thread whose own loop is
    # running (the kernel's main thread, at unload) cannot do; closing needs no run.
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


def _close_idle_thread_loops() -> None:
    """Close every thread's own loop that nothing runs (a running one is left to its thread)."""
    with _lock:
        idle = [(ident, loop) for ident, loop in _thread_loops.items() if not loop.is_running()]
        for ident, _ in idle:
            del _thread_loops[ident]
    for _, loop in idle:
        _close(loop)


def cancel(work: "asyncio.Task[Any] | concurrent.futures.Future[Any]") -> None:
    """Cancel running work from any thread."""
    if isinstance(work, asyncio.Task):
        work.get_loop().call_soon_threadsafe(work.cancel)
    else:
        work.cancel()


def _on_loop_thread(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
