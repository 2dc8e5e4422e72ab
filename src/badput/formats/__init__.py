"""Formats that several rooms read or write, kept at the bottom of the house (DESIGN.md:
"down, never up"): stores, compat and the monitor all import them, and they import only
:mod:`badput.events`.

- :mod:`badput.formats.mgm`: ml-goodput-measurement's Cloud Logging payloads (both ways)
  and its badput sources by badput bucket.
"""
