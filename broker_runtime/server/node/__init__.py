"""One broker node, composed: the lifecycle (``broker``), the factories that build its components in dependency
order (``compose``), the two deployments behind the seam ``server.context.Deployment`` (``single_node``, a cluster
of one; ``local_cluster``, a node of a cluster on this host), the coordinators' internal topics on each
(``internal_topics``), and the dispatcher that routes each decoded request to its handler (``dispatcher``).

This is the composition root: it imports the rest of ``server`` and ``server.handlers``, and nothing in those
imports it back, so the packages form no cycle (``server`` <- ``server.handlers`` <- ``server.node``).
"""
