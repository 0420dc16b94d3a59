"""LangGraph 1.x: the model -> tool graph, run once per request with ``graph.invoke``.

The graph LangGraph's documentation builds first: a ``StateGraph(MessagesState)`` with a
``model`` node that answers with one tool call (an ``AIMessage`` carrying ``tool_calls``;
the model itself is instant, as tickwork's side is) and a prebuilt ``ToolNode`` running an
instant ``@tool``, ``START -> model -> tools -> END``. The graph is compiled before the
clock starts; each run is one ``invoke`` of a fresh input, one after another (the fastest
way here to run many short CPU-bound graphs: ``batch`` adds a thread pool around the same
work).

LangGraph is optional (the ``bench`` extra): `available` says whether it imports.
"""

from __future__ import annotations

from typing import Any

from ._timing import Stopwatch

__all__ = ["LangGraphRig", "available"]


def available() -> str | None:
    """None when LangGraph 1.x imports, else why not (the row is skipped with this message)."""
    try:
        from importlib.metadata import version

        import langgraph  # noqa: F401
        from langgraph.graph import StateGraph  # noqa: F401
        from langgraph.prebuilt import ToolNode  # noqa: F401
    except ImportError as exc:
        return f"langgraph is not installed ({exc}); pip install -e '.[bench]'"
    got = version("langgraph")
    if int(got.split(".")[0]) < 1:
        return f"langgraph {got} is installed; this row needs LangGraph 1.x"
    return None


class LangGraphRig:
    """A compiled model -> tool graph; `run(n)` invokes it ``n`` times."""

    def __init__(self) -> None:
        from langchain_core.messages import AIMessage, HumanMessage
        from langchain_core.tools import tool
        from langgraph.graph import END, START, MessagesState, StateGraph
        from langgraph.prebuilt import ToolNode

        @tool
        def lookup(query: str) -> str:
            """Look ``query`` up (instant)."""
            return f"found {query}"

        def model(state: MessagesState) -> dict[str, Any]:
            asked = state["messages"][-1].content
            call = {"name": "lookup", "args": {"query": str(asked)}, "id": "c1"}
            return {"messages": [AIMessage(content="", tool_calls=[call])]}

        graph = StateGraph(MessagesState)
        graph.add_node("model", model)
        graph.add_node("tools", ToolNode([lookup]))
        graph.add_edge(START, "model")
        graph.add_edge("model", "tools")
        graph.add_edge("tools", END)
        self.graph = graph.compile()
        self._human = HumanMessage

    def run(self, n: int) -> Stopwatch:
        """Invoke the graph ``n`` times, one after another; return the time it took."""
        invoke, human = self.graph.invoke, self._human
        with Stopwatch() as sw:
            for i in range(n):
                out = invoke({"messages": [human(content=f"task {i}")]})
        if out["messages"][-1].content != f"found task {n - 1}":
            raise RuntimeError(f"the graph ended with {out['messages'][-1]!r}")
        return sw
