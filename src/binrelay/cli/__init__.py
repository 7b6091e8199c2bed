"""Command-line interface: thin commands over the library.

May import: any binrelay package (``testing`` only for the ``demo`` command, lazily).
"""
