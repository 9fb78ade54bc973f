"""What the driver and the executors share: options, connections, schemas, the task-to-driver message, logging.

Runs on: driver (planning, commit); executors (task).

The options are parsed once on the driver (a bad option fails before any task starts) into frozen dataclasses
that travel to the executors inside the pickled reader or writer; the commit message is filled by a write task
and read by the driver's ``commit()``. Imports nothing else of the connector (the bottom of its layering:
``common <- read``; ``common <- exactly_once <- write <- stream``; the package's top modules above them all).
"""
