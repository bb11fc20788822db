"""``elf demo``: the product's main demo on an embedded default (one command, no set-up) —
an operator-side program that shows the apps running on a local cluster.

Contract (:func:`apps.demo.run.run_demo`, see ``docs/demo.md``):

1. Starts a :class:`~agent.server.cluster.LocalCluster` of ``agents`` real agent processes on
   loopback; every process has two file inputs (``clicks``, ``tweets``) in the work
   directory and writes the rollup lake ``<workdir>/lake`` (``ELF_LAKE``).
2. Submits micro-promotion, product-bundling, sale-prediction and spam-campaign (specs built
   by the apps' own spec builders, :mod:`apps.demo.jobs`) with short epochs
   (``epoch_seconds``) and the paper's 10-epoch windows, all starting at the same epoch.
3. :class:`~apps.demo.feed.LiveFeed` (a background thread) appends seeded clickstream and
   tweet JSON lines (:mod:`apps.workload`) to every agent's files at their event time,
   ``rate`` events per second per agent and stream.
4. Every tick it polls the cluster through the HTTP API (:mod:`apps.demo.poll`: results from
   the masters, the promoted list from an agent's local copy, the masters' multicast latency)
   and shows it (:mod:`apps.demo.render`): a refreshing ``rich`` view on a terminal, plain
   ``[t=..s]`` lines otherwise.
5. At a third of the duration it zooms spam-campaign's filter at runtime
   (``POST /api/v1/jobs/spam-campaign/change``) and prints the applied time; every tick it
   asks sale-prediction about the top promoted product (a cross-job routed query).
6. At the end (``duration`` elapsed or Ctrl-C) it stops the feed, waits for the last data
   epoch's results (not after Ctrl-C), stops the cluster (SIGTERM, graceful; kill after a
   timeout), prints a summary, and — unless ``spark`` is False or it was interrupted — runs
   the promotion-lift historical join in Spark over the lake with the catalogue and a
   past-sales table it generated, and prints the top rows (:mod:`apps.demo.spark`).

Exit codes: 0 done (also when Java is missing: the Spark step prints why and is skipped),
1 the cluster or the Spark job failed, 130 interrupted by Ctrl-C (after a clean stop).
No process the demo started outlives it.

Modules, one concern each: ``jobs`` (which jobs, their specs), ``state`` (options and what
the view shows), ``feed`` (the live log writer), ``poll`` (API polling and the runtime
change), ``render`` (terminal view, plain lines, summary), ``spark`` (the Spark step),
``run`` (orchestration), ``cli`` (the ``elf demo`` command, an ``elf.commands`` entry point).
"""
