"""The release gate: Locust users for the serving stack, SLA files, and ``loadtests gate``.

Two halves that never share a process:

* the **gate** (``cli``, ``sla``, ``probe``, ``runner``, ``stats``, ``evaluate``, ``report``,
  ``plot``): plain Python. It checks the target, starts Locust in a subprocess, reads Locust's
  CSV files and judges them against an SLA file. It must never import ``locust``, because
  importing Locust monkey-patches the whole process with gevent;
* the **load** (``locustfile``, ``users``, ``shapes``): what the Locust subprocess imports.

``entities``, ``payloads``, ``profiles``, ``settings`` and ``targets`` are shared: free of Locust and gevent,
so the gate and the unit tests can use them too.
"""
