"""The shared kernel: small helpers every other package may use.

It sits at the bottom: it imports no bounded context, not ``messaging`` and not ``config``
(import-linter keeps it so), so any deployment of any context can carry it unchanged.
"""
