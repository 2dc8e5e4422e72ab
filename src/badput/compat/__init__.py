"""Compatibility with other goodput tools: their log formats and their figures.

- :mod:`badput.compat.resiliency`: the ``resiliency.goodput_measure`` library's JSONL
  event logs (read them, reproduce its calculator, import them into a badput store).

Nothing here is imported by ``import badput``; import the sub-module you need.
"""

from __future__ import annotations

__all__: list[str] = []
