"""Tool jobs on a Dask cluster: the backend a world can hand its tool lane to.

The tick loop stays on one host, single-threaded and deterministic; only tool jobs move.
The lane keeps owning capacity, queue and counters, and submits a job to the cluster only
when a permit is free, so a cluster of any size never runs more than ``tool_capacity`` of
one world's jobs at once. A job is plain data (`runtime.world.effects.ToolBatch`: the registry,
the calls, the agent id), pickled to a worker, where each call's tool is found by name.

`DaskBackend.local` starts a `LocalCluster` on loopback; `DaskBackend.connect` joins a
running scheduler; `tool_backend` builds either from scenario-style settings. Hand the
backend to ``World(tool_executor=backend)`` and the world closes it with itself; hand it
``backend.executor`` to share one backend between worlds. ``distributed`` is imported only
when a backend is made, so this module is safe to import without it.
"""

from runtime.cluster.dask_backend import BACKENDS, DaskBackend, tool_backend
from runtime.cluster.executor import DaskExecutor

__all__ = ["BACKENDS", "DaskBackend", "DaskExecutor", "tool_backend"]
