"""Baselines and peer implementations: what a user would pick instead of tickwork.

Each module is written the way a competent user of that tool would write it, not as a
straw man, and each says in its docstring why it is a fair comparison:

- `raw_pool`: a ``ThreadPoolExecutor`` fed no-op jobs (for ``lane_overhead``);
- `event_handoff`: a ``threading.Event`` set by one thread, waited on by another
  (for ``wake_latency``);
- `dict_hub`: a dict of open prompts, a lock, and an ``Event`` per request
  (``DictHub``) and without the ``Event`` (``LeanDictHub``, for ``hub_throughput``);
- `bare_loop`: ``gen.send`` over a list of generators plus one field write each
  (for ``step_throughput``);
- `simpy_sleep`: SimPy 4 processes yielding ``env.timeout`` (for ``vs_simpy``);
- `asyncio_agents`: the tool-and-prompt workload in idiomatic asyncio (for ``vs_asyncio``);
- `bare_esper`: bare esper entities with the same component data (for ``memory_per_agent``);
- `simpy_random`: SimPy processes on random sleeps and on a shared ``Resource``
  (``simpy_random_*``, ``simpy_resource``);
- `mesa_agents`: Mesa 3 ``AgentSet.do("step")`` (``mesa_agentset``);
- `asyncio_turns`: whole turns (model, tools, prompt) in idiomatic asyncio (``asyncio_*``);
- `langgraph_graph`: LangGraph 1.x's model -> tool graph (``langgraph_graph``).
"""
