"""libslurm calls that pyslurm lacks, on the library pyslurm loaded (in the pyslurm child only).

:mod:`slonkd.adapters.slurm.pyslurm_child` imports pyslurm, which loads one libslurm (22.05's
``libslurm.so.38``, 24.11's ``libslurmfull.so``); two libslurms must never share a process,
so what pyslurm does not wrap is called here through ctypes on that same library, found in
``/proc/self/maps`` and opened with ``RTLD_NOLOAD`` (never loaded a second time):

- :func:`library_path` and :func:`api_version`: which library, and its API number (38 for
  22.05, 42 for 24.11: not the release, which slurmctld says);
- :func:`topology_text`: ``slurm_load_topo`` printed by ``slurm_print_topo_info_msg`` into a
  temporary file, the function ``scontrol show topology`` prints with, so both backends give
  the same text. Its signature changed (24.11 added a node list): API 38 takes three
  arguments, API 42 four; any other API is refused, never called with a guessed signature.

A libslurm error is a :class:`SlurmCallError` with ``slurm_get_errno()``'s number, typed by
the child like pyslurm's own (:func:`~slonkd.adapters.slurm.parsing_pyslurm.error_kind`).
The libslurm change poll's child binds its own calls (:mod:`slonkd.adapters.slurm.libslurm`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from pathlib import Path

TOPO_PRINT_ARGS = {38: 3, 42: 4}
"""API number -> ``slurm_print_topo_info_msg``'s argument count (slurm.h of 22.05, 24.11)."""


class SlurmCallError(Exception):
    """A libslurm call failed; ``errno`` is ``slurm_get_errno()``."""

    def __init__(self, call: str, errno: int) -> None:
        super().__init__(f"{call}: SLURM error {errno}")
        self.errno = errno


def library_path(maps: str = "/proc/self/maps") -> str:
    """The path of the libslurm this process loaded ("" when none is)."""
    with contextlib.suppress(OSError), open(maps, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            parts = line.split(None, 5)
            if len(parts) == 6 and Path(parts[5].strip()).name.startswith("libslurm"):
                return parts[5].strip()
    return ""


def _loaded(path: str) -> ctypes.CDLL:
    """The already loaded library at ``path`` (OSError when it is not loaded)."""
    return ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW, use_errno=True)


def _errno(lib: ctypes.CDLL) -> int:
    """SLURM's error number of the last call.

    22.05's ``slurm_get_errno()``; 24.11 exports no such function (there it is ``errno``), so
    the C errno ctypes kept for the call.
    """
    try:
        get = lib.slurm_get_errno
    except AttributeError:
        return ctypes.get_errno()
    get.restype = ctypes.c_int
    return int(get())


def _api(lib: ctypes.CDLL) -> int:
    lib.slurm_api_version.restype = ctypes.c_long
    return int(lib.slurm_api_version())


def api_version(path: str) -> str:
    """``slurm_api_version()`` of the already loaded library at ``path``, e.g. ``38.0.0``.

    That is the library's API (its soname's number: 38 for 22.05's ``libslurm.so.38``), not
    the SLURM release: the release is slurmctld's (op ``versions``) and pyslurm's own.
    """
    if not path:
        return ""
    try:
        num = _api(_loaded(path))
    except (OSError, AttributeError):
        return ""
    return f"{num >> 16}.{(num >> 8) & 0xFF}.{num & 0xFF}"


def topology_text(path: str) -> str:
    """The topology slurmctld runs, as ``scontrol show topology`` prints it (one RPC)."""
    if not path:
        raise RuntimeError("topology: no libslurm loaded")
    lib = _loaded(path)
    major = _api(lib) >> 16
    nargs = TOPO_PRINT_ARGS.get(major)
    if nargs is None:
        raise RuntimeError(f"topology: slurm_print_topo_info_msg of API {major} is not known")
    lib.slurm_load_topo.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.slurm_load_topo.restype = ctypes.c_int
    lib.slurm_free_topo_info_msg.argtypes = [ctypes.c_void_p]
    lib.slurm_free_topo_info_msg.restype = None
    printer = lib.slurm_print_topo_info_msg
    printer.restype = None
    if nargs == 3:
        printer.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    else:
        printer.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
    libc = ctypes.CDLL(None)
    libc.tmpfile.restype = ctypes.c_void_p
    libc.fflush.argtypes = [ctypes.c_void_p]
    libc.fileno.argtypes = [ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    msg = ctypes.c_void_p()
    if lib.slurm_load_topo(ctypes.byref(msg)) != 0:
        raise SlurmCallError("slurm_load_topo", _errno(lib))
    stream = libc.tmpfile()
    try:
        if not stream:
            raise OSError("tmpfile() failed")
        if nargs == 3:
            printer(stream, msg, 0)
        else:
            printer(stream, msg, None, 0)
        libc.fflush(stream)
        with os.fdopen(os.dup(libc.fileno(stream)), "rb") as out:
            out.seek(0)
            return out.read(8 << 20).decode("utf-8", errors="replace")
    finally:
        if stream:
            libc.fclose(stream)
        lib.slurm_free_topo_info_msg(msg)
