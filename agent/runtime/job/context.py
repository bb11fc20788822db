"""The context a job runtime gives each of its job instances (``Job.bind``).

Contract: :class:`RuntimeContext` is the :class:`~agent.jobs.job.JobContext` of one job on one
agent: its node id, whether it masters the job now, the last feedback value, joining another
job's tree, ``send_to`` another agent (a snapshot as base64 bytes, or JSON data), a multicast
down the job's first tree (master only; the kinds ``feedback`` and ``empty`` are the
runtime's own, refused) and a query routed to another job's master (its ``on_query`` reply; an
``"error"`` reply raises 404 or 400, no reply 503).
"""

from __future__ import annotations

import base64
from typing import Any

from agent.errors import BadRequest, NotFound, Unavailable
from agent.runtime.job.host import JobHost
from cbt import Snapshot


class RuntimeContext:
    """The :class:`~agent.jobs.job.JobContext` the runtime gives each job instance."""

    def __init__(self, host: JobHost) -> None:
        self.host = host

    @property
    def node_id(self) -> int:
        return self.host.network.node_id

    @property
    def is_master(self) -> bool:
        return self.host.is_master

    @property
    def feedback(self) -> Any:
        return self.host.job.feedback

    async def subscribe(self, app: int) -> None:
        trees = self.host.network.trees
        assert trees is not None
        await trees.join(self.host.job_table.master_tree(app), job=self.host.name, subscriber=False)

    async def send_to(self, node_id: int, paos: Snapshot | dict[str, Any]) -> None:
        network = self.host.network
        url = await network.data_url_of(node_id)
        body: dict[str, Any] = {"job": self.host.name, "from": f"{network.node_id:040x}"}
        if isinstance(paos, Snapshot):
            body["snapshot"] = base64.b64encode(paos.to_bytes()).decode()
        else:
            body["data"] = paos
        await network.client.post_json(url, "/agent/v1/recv", body)

    async def multicast(self, message: dict[str, Any]) -> Any:
        if not self.host.is_master:
            raise BadRequest("only the job's master can multicast")
        if "kind" in message and message["kind"] in ("feedback", "empty"):
            raise BadRequest("multicast kinds 'feedback' and 'empty' are reserved")
        return await self.host.control.multicast(self.host.tree_list[0], message)

    async def route(self, app: int, message: dict[str, Any]) -> dict[str, Any]:
        trees = self.host.network.trees
        assert trees is not None
        tree = self.host.job_table.master_tree(app)
        try:
            reply = await trees.query(tree, {"op": "job_query", "message": message}, timeout=10.0)
        except Exception as exc:
            raise Unavailable(f"no reply from the master of app {app:040x}: {exc}") from None
        if "error" in reply:
            status = reply.get("status", 400)
            raise (NotFound if status == 404 else BadRequest)(str(reply["error"]))
        return reply
