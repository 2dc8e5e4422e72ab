"""The ``badput`` command: the group and the commands that read a finished or running log
(``_commands``), the commands that run or follow a job (``_live``), and the helper process
that lists a job while the command imports the engine (``_list_ahead``). Thin: parsing and
printing; the work is in the library."""

from badput.cli import (
    _advice,  # noqa: F401 (registers advise and whatif on main)
    _archive,  # noqa: F401 (registers compact on main)
    _fleet,  # noqa: F401 (registers fleet on main)
    _jobs,  # noqa: F401 (registers jobs and compare on main)
    _live,  # noqa: F401 (registers run, demo, monitor and watch on main)
)
from badput.cli._commands import console_main, main, parse_timestamp

__all__ = ["console_main", "main", "parse_timestamp"]
