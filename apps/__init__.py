"""The applications of the ELF paper, written against the agent's job API, and the programs
that exercise them.

* Job classes (registered by name and installed as ``elf.jobs`` entry points):
  micro-promotion, product-bundling (with :mod:`apps.bundles`), sale-prediction,
  spam-campaign and wordcount; :mod:`apps.params` holds their shared parameter checks. Each
  app module has a spec builder with the paper's defaults. Job modules import only
  :mod:`agent.api` (the job author's surface) and :mod:`cbt` — never the runtime behind it.
* The workload they run on: :mod:`apps.workload` (seeded clickstreams, tweets, catalogue,
  renderers and writers) and ``elf generate`` (:mod:`apps.workload_cli`).
* ``elf demo`` (:mod:`apps.demo`): an operator-side program that starts a local cluster,
  feeds it live logs, runs four apps and a Spark join over the lake. Being a client of the
  system rather than job code, it may additionally use :mod:`agent.client`,
  :mod:`agent.server.cluster` and :mod:`spark_sink`; ``elf generate`` may use
  :mod:`agent.client` and :mod:`agent.cli_common`. Both reach the ``elf`` CLI as
  ``elf.commands`` entry points, so ``agent`` never imports ``apps``.
"""
