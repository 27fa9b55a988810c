"""``python -m slonkd_sandbox ARGS``: ``slonkd sandbox ARGS`` where no installer registered it.

The harness starts its own detached sandbox and demo this way, so they run the same with the
harness installed (``slonkd sandbox``, through the entry point) or only checked out.
Neighbours: :mod:`slonkd_sandbox.command` (the parser and the actions).
"""

from __future__ import annotations

import argparse

from slonkd_sandbox import command


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` as ``slonkd sandbox`` would and run the action."""
    parser = argparse.ArgumentParser(
        prog="slonkd sandbox",
        description=command.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    command.configure(parser)
    return command.main(parser.parse_args(argv), parser)


if __name__ == "__main__":
    raise SystemExit(main())
