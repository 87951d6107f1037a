"""``agentik serve``: configuration from file, environment and flags; logs to stderr;
SIGINT/SIGTERM stop taking turns, give those under way ``[limits]
graceful_timeout`` seconds, interrupt what is left (resumed at the next start),
close the writer and exit 0, within ``graceful_timeout + 5`` seconds.

A second signal interrupts the turns under way at once (history stays valid:
each records results for the calls it could not finish) and exits as soon as
that is committed. A start-up failure a user can fix (the port is in use, the
database cannot be opened) is one line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import errno
import gc
import logging
import signal
import sys
from functools import partial
from pathlib import Path

import attrs
import trio

from agentik.cli._failures import REPORTED, first_reportable, report
from agentik.server import ServerConfig, load_config

log = logging.getLogger("agentik.server")

STOP_MARGIN = 3.0
"""Seconds past ``graceful_timeout`` (after the first signal), or after a
second signal, before everything still running is cancelled: a last resort
for code that ignores cancellation (the orderly path takes milliseconds)."""

_FLAGS = {
    "bind": ("server", "bind"),
    "database": ("storage", "database"),
    "model_base_url": ("model", "base_url"),
    "model": ("model", "model"),
    "system_prompt": ("agent", "system_prompt"),
    "toolsets": ("agent", "toolsets"),
    "tools": ("agent", "tools"),
    "gc_freeze": ("server", "gc_freeze"),
}


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    overrides: dict[tuple[str, str], object] = {}
    for flag, setting in _FLAGS.items():
        value = getattr(args, flag, None)
        if value is not None:
            overrides[setting] = value
    return load_config(Path(args.config) if args.config else None, overrides=overrides)


def tune_gc() -> None:
    """Move start-up objects out of the collector's reach and collect less often:
    a server allocates many short-lived objects per request (PERFORMANCE.md)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


class LineFormatter(logging.Formatter):
    """``agentik serve``'s log line: time, level, logger, message. The server
    logs a line per request and per turn, so the time text (its resolution is
    a second) is built once a second rather than once a line."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s", "%Y-%m-%dT%H:%M:%S")
        self._second = -1
        self._text = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        second = int(record.created)
        if second != self._second:  # handlers format under their lock: no race
            self._text = super().formatTime(record, datefmt)
            self._second = second
        return self._text


def setup_logging() -> None:
    """Log lines to stderr, for the ``agentik serve`` process (not for an app that
    embeds agentik: it switches off the Logging HOWTO's per-record lookups that
    the line does not use, the caller's frame, thread and process, process-wide)."""
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LineFormatter())
    root = logging.getLogger("agentik")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    root.propagate = False


@attrs.define
class _Progress:
    listening: bool = False
    """The server bound its address: an OSError after this is not about the bind."""


_BIND_ERRORS = frozenset({errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES})


async def serve_until_signalled(config: ServerConfig, progress: _Progress | None = None) -> None:
    from agentik.server import serve_agentik

    progress = _Progress() if progress is None else progress
    stop, now = trio.Event(), trio.Event()
    grace = config.limits.graceful_timeout
    async with trio.open_nursery() as nursery:

        async def cancel_after(seconds: float) -> None:
            await trio.sleep(seconds)
            log.warning("still stopping %g s later: cancelling what is left", seconds)
            nursery.cancel_scope.cancel()

        async def watch_signals() -> None:
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    name = signal.Signals(signum).name
                    if not stop.is_set():
                        log.info("%s received: no new turns; those under way get %g s", name, grace)
                        stop.set()
                        nursery.start_soon(cancel_after, grace + STOP_MARGIN)
                    elif not now.is_set():
                        log.info("%s received again: interrupting the turns under way", name)
                        now.set()
                        nursery.start_soon(cancel_after, STOP_MARGIN)
                    else:
                        nursery.cancel_scope.cancel()
                        return

        async def run_server(task_status: trio.TaskStatus[str]) -> None:
            await serve_agentik(
                config,
                shutdown_trigger=stop.wait,
                interrupt_trigger=now.wait,
                task_status=task_status,
            )
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch_signals)
        await nursery.start(run_server)
        progress.listening = True
    log.info("stopped")


def _describe(error: BaseException, config: ServerConfig, progress: _Progress) -> str:
    if isinstance(error, OSError) and not progress.listening and error.errno in _BIND_ERRORS:
        host = f"[{config.host}]" if ":" in config.host else config.host
        return f"cannot listen on {host}:{config.port}: {error.strerror or error}"
    return str(error)


def run_serve(args: argparse.Namespace) -> int:
    from agentik.server import load_tools, load_toolsets

    config = config_from_args(args)
    # A bad entry point is a configuration error, before start-up.
    load_toolsets(config.toolsets)
    load_tools(config.tools)
    setup_logging()
    if config.gc_freeze:
        tune_gc()
    progress = _Progress()
    failure: BaseException | None = None
    try:
        trio.run(partial(serve_until_signalled, config, progress))
    except* REPORTED as group:  # nested as deep as the nurseries it crossed
        failure = first_reportable(group, REPORTED)
    if failure is not None:
        return report("serve", _describe(failure, config, progress))
    return 0
