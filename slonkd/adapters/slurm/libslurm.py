"""Has slurmctld's node table changed since time T? One libslurm call, no table sent.

slurmctld answers a node-table request that carries the time of the caller's last copy
with ``SLURM_NO_CHANGE_IN_DATA`` and packs nothing (how ``sinfo --iterate`` stays cheap).
This module binds that one call of the installed libslurm through ctypes, so that the
coordinator's poll can ask "changed since T?" several times a second and run its scontrol
read (still the source of the data, and the fallback) only when the answer is yes.

What is bound, and why it is safe across SLURM 22.05 and 24.11:

- ``int slurm_load_node(time_t update_time, node_info_msg_t **resp, uint16_t show_flags)``,
  ``void slurm_free_node_info_msg(node_info_msg_t *)``, ``char *slurm_strerror(int)`` and
  ``void slurm_init(const char *conf)``: same signatures in both releases. The error number
  is read from the C ``errno`` (ctypes ``use_errno``): ``slurm_get_errno`` is not exported
  by 24.11's library.
- The only structure field read is ``node_info_msg_t``'s first member, ``time_t
  last_update``; it is first in both releases' ``slurm.h`` (``time_t last_update;
  uint32_t record_count; node_info_t *node_array;``). Nothing version-specific
  (``node_info_t``) is ever touched; the message is freed by the library itself.
- ``slurm_init(conf)`` is given the ``SLURM_CONF`` scontrol is given (NULL: libslurm reads
  ``SLURM_CONF`` from the environment), so a harness cluster's configuration is honoured.
- The library is opened with ``RTLD_GLOBAL``: its plugins (auth_munge.so) resolve their
  symbols against it.

The library is the one of the SLURM installed next to slonkd (Debian's package ships it as
``slurm-wlm/libslurmfull.so``; ``libslurm.so.N`` where a distribution ships that). When it
cannot be loaded (absent, a C library too old for it) or speaks another protocol than
slurmctld, the poll reads with scontrol every period as before (logged once).

PyPI's ``pyslurm`` is not used: its releases are built for SLURM 25.11 only, a release no
Debian ships (bookworm has 22.05, trixie 24.11), and it must be compiled against the exact
release it talks to. Two ctypes calls with stable signatures fit every release slonkd runs on.

libslurm ends its process (``fatal()``) where its configuration or plugins do not fit it,
and when the controller's name does not resolve, at any call: so slonkd never loads it
into its own process. :mod:`slonkd.adapters.slurm.libslurm_child` runs :func:`child_main`
in a child and asks through it; :class:`LibSlurm` is that child's side.

Each question runs in a worker thread (it blocks) with a bounded wait, and at most one
is in flight (:class:`ChangeProbe`): a question that outlived its wait keeps the slot until
libslurm's own MessageTimeout ends it, and questions meanwhile fail fast with a transient
error.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any

from slonkd.core.errors import SlonkdError, TerminalError, TransientError

DEFAULT_CONF = "/etc/slurm/slurm.conf"  # libslurm's compiled-in default on Debian
LIBRARY_PATHS = (
    "/usr/lib/x86_64-linux-gnu/slurm-wlm/libslurmfull.so",
    "/usr/lib/aarch64-linux-gnu/slurm-wlm/libslurmfull.so",
    "libslurm.so.42",
    "libslurm.so.38",
    "libslurm.so.37",
)
"""Where the library is looked for, first found wins (SLURM_LIBRARY overrides)."""

SLURM_SUCCESS = 0
SLURM_NO_CHANGE_IN_DATA = 1900
"""slurm_errno.h: the table is unchanged since the time the caller sent."""
SLURM_PROTOCOL_VERSION_ERROR = 1005
"""slurm_errno.h: the library and slurmctld speak releases too far apart."""
SHOW_ALL = 0x0001
"""slurm.h: hidden partitions' nodes too, as ``scontrol show node`` with ``-a``."""

TERMINAL_ERRNOS = frozenset({SLURM_PROTOCOL_VERSION_ERROR})
"""Errors after which this library will never answer this slurmctld: fall back for good."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeTableStamp:
    """One answer: did the table change since the time sent, and the time of the table now."""

    changed: bool
    last_update: int
    """The time to send next: when slurmctld packed the table (the time sent, when unchanged).

    slurmctld answers "no change" when its last node-table change is at least one second
    older than this time, so a change in the second of a read is reported once more: a
    spurious re-read at worst, never a missed change.
    """


def interpret(rc: int, errno: int, sent: int, last_update: int | None) -> NodeTableStamp:
    """The stamp for one call's outcome, or the error it maps to (pure).

    ``rc`` is slurm_load_node's return, ``errno`` the error number after it, ``sent`` the
    time the caller sent, ``last_update`` the message's first field when one came back.
    """
    if rc == SLURM_SUCCESS and last_update is not None:
        return NodeTableStamp(changed=True, last_update=last_update)
    if rc != SLURM_SUCCESS and errno == SLURM_NO_CHANGE_IN_DATA:
        return NodeTableStamp(changed=False, last_update=sent)
    raise error_for(errno)


def error_for(errno: int, text: str = "") -> SlonkdError:
    """slonkd's error for a libslurm error number: protocol mismatch terminal, else transient."""
    detail = f"slurm_load_node: errno {errno}" + (f" ({text})" if text else "")
    if errno in TERMINAL_ERRNOS:
        return TerminalError(detail)
    return TransientError(detail)


class _NodeInfoMsg(ctypes.Structure):
    """The first member of node_info_msg_t only: never read further (see module docstring)."""

    _fields_ = [("last_update", ctypes.c_int64)]


class ChangeProbe:
    """Asks "changed since T?" one call at a time, each in a worker thread with a bounded wait.

    :class:`LibSlurm` answers in this process (the child's side);
    :class:`~slonkd.adapters.slurm.libslurm_child.ChildLibSlurm` through a child process
    (the coordinator's side).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._busy = threading.Lock()

    def _ask(self, since: int) -> NodeTableStamp:
        """The blocking question (worker thread)."""
        raise NotImplementedError

    def _call(self, since: int) -> NodeTableStamp:
        """The blocking call (worker thread); releases the one-in-flight slot when done."""
        try:
            return self._ask(since)
        finally:
            self._busy.release()

    async def changed_since(self, since: int, *, timeout_s: float = 5.0) -> NodeTableStamp:
        """Whether the node table changed after ``since`` (0: first call, always changed).

        Raises TransientError on timeout, a call still in flight, or slurmctld unreachable;
        TerminalError when this library cannot talk to this slurmctld at all.
        """
        if not self._busy.acquire(blocking=False):
            raise TransientError("slurm_load_node: previous call still in flight")
        try:
            task = asyncio.ensure_future(asyncio.to_thread(self._call, since))
        except BaseException:
            self._busy.release()
            raise
        try:
            async with asyncio.timeout(timeout_s):  # not wait_for: see test_cancellation.py
                return await asyncio.shield(task)
        except TimeoutError:
            task.add_done_callback(_drop_result)
            raise TransientError(f"slurm_load_node: no answer in {timeout_s:g} s") from None


class LibSlurm(ChangeProbe):
    """The library bound in this process (the child's side: libslurm may end its process)."""

    def __init__(self, lib: Any, path: str, conf: str | None = None) -> None:
        super().__init__(path)
        self._lib = lib
        lib.slurm_load_node.argtypes = [
            ctypes.c_int64,
            ctypes.POINTER(ctypes.POINTER(_NodeInfoMsg)),
            ctypes.c_uint16,
        ]
        lib.slurm_load_node.restype = ctypes.c_int
        lib.slurm_free_node_info_msg.argtypes = [ctypes.POINTER(_NodeInfoMsg)]
        lib.slurm_free_node_info_msg.restype = None
        lib.slurm_strerror.argtypes = [ctypes.c_int]
        lib.slurm_strerror.restype = ctypes.c_char_p
        lib.slurm_init.argtypes = [ctypes.c_char_p]
        lib.slurm_init.restype = None
        lib.slurm_init(conf.encode() if conf else None)

    def _ask(self, since: int) -> NodeTableStamp:
        resp = ctypes.POINTER(_NodeInfoMsg)()
        ctypes.set_errno(0)
        rc = self._lib.slurm_load_node(since, ctypes.byref(resp), SHOW_ALL)
        errno = ctypes.get_errno()
        last: int | None = None
        if rc == SLURM_SUCCESS and resp:
            last = int(resp.contents.last_update)
            self._lib.slurm_free_node_info_msg(resp)
        try:
            return interpret(rc, errno, since, last)
        except SlonkdError as exc:
            raw = self._lib.slurm_strerror(errno)
            text = raw.decode(errors="replace") if raw else ""
            raise error_for(errno, text) from exc


def _drop_result(task: asyncio.Future[NodeTableStamp]) -> None:
    """Collect a timed-out call's late result so that asyncio does not log it as lost."""
    if not task.cancelled():
        task.exception()


def unreadable_conf(conf: str | None) -> str | None:
    """Why the slurm.conf libslurm would read cannot be read (None: it can).

    ``conf``, else ``SLURM_CONF``, else Debian's compiled-in default. Checked before any
    library call: with no file libslurm falls back to a configless DNS SRV lookup, which
    hangs where the resolver does not answer and then ends the process.
    """
    path = conf or os.environ.get("SLURM_CONF") or DEFAULT_CONF
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        return f"cannot read slurm.conf {path}: {exc.strerror or exc}"
    return None


def child_main(argv: list[str]) -> None:
    """The child's side (``python -m slonkd.adapters.slurm.libslurm PATH CONF``).

    Opens and initialises the library, says ``{"ready": path}``, then answers one JSON line
    per time read from stdin until stdin closes: ``{"changed", "last_update"}`` or
    ``{"error": "transient" | "terminal", "detail"}``. A ``fatal()`` of libslurm (no
    slurm.conf; the controller's name that does not resolve, at any call) ends this child,
    so a slurm.conf it cannot read ends it first, with exit 2 and one line naming the path.
    """
    path, conf = argv[0], argv[1] or None
    problem = unreadable_conf(conf)
    if problem:
        print(f"libslurm child: {problem}", file=sys.stderr, flush=True)
        raise SystemExit(2)
    lib = LibSlurm(ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL, use_errno=True), path, conf)
    print(json.dumps({"ready": path}), flush=True)
    for line in sys.stdin:
        try:
            stamp = lib._ask(int(line))
        except SlonkdError as exc:
            kind = "terminal" if isinstance(exc, TerminalError) else "transient"
            said: dict[str, object] = {"error": kind, "detail": str(exc)[:300]}
        else:
            said = {"changed": stamp.changed, "last_update": stamp.last_update}
        print(json.dumps(said), flush=True)


if __name__ == "__main__":
    child_main(sys.argv[1:])
