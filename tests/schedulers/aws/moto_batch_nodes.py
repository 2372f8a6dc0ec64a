"""moto_server with AWS Batch's node variables on multi-node parallel jobs (run as a script in
place of moto_server; moto_testing.Moto does).

Batch sets AWS_BATCH_JOB_NODE_INDEX, AWS_BATCH_JOB_NUM_NODES and AWS_BATCH_JOB_MAIN_NODE_INDEX
in every node's container of a multi-node parallel job, and none of them in a container job's
(AWS Batch user guide, "Multi-node parallel jobs: environment variables"). moto 5.2.5 runs each
node as a container but sets only AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS (on the child
nodes); this adds the other three, so that a test can see what a job's scripts would read on
Batch. Container jobs are left as moto runs them.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import docker.models.containers
from moto.batch.models import Job
from moto.server import main

_run = docker.models.containers.ContainerCollection.run


def _run_node(self: Any, *args: Any, **kwargs: Any) -> Any:
    """moto's docker call for one container: moto names a multi-node job's node containers
    `<job name>-<job id>-<node index>` and runs them from the job's own thread."""
    job = threading.current_thread()
    if isinstance(job, Job) and job.job_definition.type == "multinode":
        nodes = job.job_definition.node_properties or {}
        index = str(kwargs.get("name", "")).rsplit("-", 1)[-1]
        env = kwargs.setdefault("environment", {})
        env["AWS_BATCH_JOB_NODE_INDEX"] = index
        env["AWS_BATCH_JOB_NUM_NODES"] = str(nodes.get("numNodes", ""))
        env["AWS_BATCH_JOB_MAIN_NODE_INDEX"] = str(nodes.get("mainNode", ""))
    return _run(self, *args, **kwargs)


if __name__ == "__main__":
    docker.models.containers.ContainerCollection.run = _run_node  # type: ignore[method-assign]
    main(sys.argv[1:])
