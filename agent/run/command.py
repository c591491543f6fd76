"""The ``run`` command: start the wired agent, stop it on a signal with one final export."""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import logging
import os
import signal
import threading
import time

from agent.config import Config
from agent.run.agent import SHUTDOWN_SECONDS, Agent

__all__ = ["run"]

log = logging.getLogger("agent")


def _install_signal_handlers(agent: Agent) -> None:
    """TERM and INT: final export, exit 0. QUIT: the same, after dumping every thread's stack (a daemon's
    "what are you doing?"). HUP: nothing to reload, so it is logged and ignored rather than killing the agent."""

    def stop(signum, frame):
        log.info("received %s; exporting once more and exiting", signal.Signals(signum).name)
        agent.stop_event.set()

    def quit_with_stacks(signum, frame):
        with contextlib.suppress(OSError, ValueError):  # stderr closed
            faulthandler.dump_traceback(all_threads=True)
        stop(signum, frame)

    def ignore(signum, frame):
        log.info("received SIGHUP; nothing to reload (configuration comes from flags and environment), ignoring it")

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGQUIT, quit_with_stacks)
    signal.signal(signal.SIGHUP, ignore)


# Past this, after SIGTERM, something the orderly shutdown did not foresee holds the process (the interpreter's
# exit joining a thread, say): it ends at once rather than at the kubelet's SIGKILL, and says so.
HARD_EXIT_SECONDS = SHUTDOWN_SECONDS + 1.5


def _arm_hard_exit(seconds: float = HARD_EXIT_SECONDS) -> None:
    def hard_exit() -> None:
        time.sleep(seconds)
        log.error("shutdown still not finished after %.1f s; exiting now", seconds)
        logging.shutdown()
        os._exit(1)

    threading.Thread(target=hard_exit, name="hard-exit", daemon=True).start()


# glibc's mallopt() parameter number for the arena limit (malloc.h).
_M_ARENA_MAX = -8


def _few_malloc_arenas(arenas: int | None) -> None:
    """Cap glibc's malloc arenas before the threads start, as MALLOC_ARENA_MAX would (None: it is set, and glibc
    applies it itself).

    glibc gives each thread that allocates an arena of its own (up to eight per core), each keeping the memory
    freed in it: with the agent's eight threads that was 0.5 MiB of its resident memory. The threads allocate
    under the GIL, so two arenas cost no contention. Elsewhere than glibc (musl) there is nothing to do.
    """
    if arenas is None:
        return
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (ImportError, OSError, AttributeError):
        return
    mallopt(_M_ARENA_MAX, arenas)


def run(config: Config) -> int:
    # A closed stdout or stderr must not turn every log line into a traceback on the other stream.
    logging.raiseExceptions = False
    for warning in config.warnings:  # what config read as a documented fallback, now that logging is set up
        log.warning("%s", warning)
    if config.verdict_off:  # the agent runs on: the pods' and the node's values do not depend on those settings
        log.error("%s: the cluster-autoscaler's verdict is off (state unknown) until that is fixed; the pods' and the "
                  "node's values are exported as usual", config.verdict_off)
    _few_malloc_arenas(config.malloc_arenas)
    agent = Agent(config)
    # Everything built so far (the OTel SDK, the agent; out of a pod the kubernetes package and pydantic) lives as
    # long as the process: out of the collector's way, a full collection walks only what the events bring, not
    # some 50,000 objects that can never be garbage (a third of the collector's time on a busy watch).
    gc.collect()
    gc.freeze()
    _install_signal_handlers(agent)
    agent.start()
    if config.once:
        if agent.host_usage is not None:
            agent.host_usage.sample_now()  # a CPU delta since start, so the one export has a used cpu
        agent.drain()
        if config.exporter == "table":  # the demo: a person reads this first, then the metric lines
            from agent.report.cluster_table import agent_summary

            print(agent_summary(agent.state.snapshot(), time.time()) + "\n", flush=True)
        agent.telemetry.flush()
        agent.shutdown(final_export=False)
        return 0
    # A signal handler runs in this thread even while it waits, and sets the event: no need to wake and look.
    while not agent.stop_event.wait(3600.0):
        pass
    _arm_hard_exit()
    took = agent.shutdown()
    log.info("stopped in %.2f s", took)
    return 0
