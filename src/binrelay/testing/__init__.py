"""Test and demo tooling, not the product: throwaway MariaDB servers and sysbench workloads
(:mod:`~binrelay.testing.sandbox`), a Spark standalone cluster on loopback
(:mod:`~binrelay.testing.cluster`), the scripted demo (:mod:`~binrelay.testing.demo`), a
TCP proxy that cuts connections (:mod:`~binrelay.testing.proxy`) and their process helpers
(:mod:`~binrelay.testing.procs`).

No product package imports it (only the CLI's ``demo`` command, lazily).

May import: any binrelay package.
"""
