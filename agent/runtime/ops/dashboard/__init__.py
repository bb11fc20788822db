"""The live dashboard every agent serves: ``summary`` (one agent's compact picture, the peer
route ``/agent/v1/summary``), ``cluster`` (the serving agent's bounded, cached cluster picture)
and ``routes`` (the page, its JSON and Server-Sent Events feed, the query action); ``static/``
holds the page and the vendored uPlot. See docs/dashboard.md."""
