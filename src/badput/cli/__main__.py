"""``python -m badput.cli``: the ``badput`` command."""

from badput.cli import console_main

console_main()
