"""The `todo` tool: the model's task list for this session.

Read with no arguments; write with `todos`. `merge=true` updates items by id and appends new
ones; without it the list is replaced. Four states: pending, in_progress, completed, cancelled.
The list is agent state, not history: it survives context compression (the digest includes it)
and is saved in the session transcript, so a resumed session has it back.
"""

from __future__ import annotations

import threading
from typing import Any, Literal, TypedDict

from ..tools.context import ToolContext
from ..tools.registry import Tool, ToolError
from ..tools.resources import tool_wide

STATES = ("pending", "in_progress", "completed", "cancelled")


class TodoItem(TypedDict):
    id: str
    content: str
    status: Literal["pending", "in_progress", "completed", "cancelled"]


class TodoResult(TypedDict):
    todos: list[TodoItem]
    counts: dict[str, int]

MARKS = {"pending": "[ ]", "in_progress": "[>]", "completed": "[x]", "cancelled": "[-]"}


class TodoList:
    def __init__(self, items: list[dict[str, str]] | None = None) -> None:
        self._items: list[dict[str, str]] = [dict(i) for i in items or []]
        self._lock = threading.Lock()

    @property
    def items(self) -> list[dict[str, str]]:
        with self._lock:
            return [dict(i) for i in self._items]

    def write(self, todos: list[Any], *, merge: bool) -> None:
        cleaned = [_validate(item, n) for n, item in enumerate(todos)]
        with self._lock:
            if not merge:
                self._items = cleaned
                return
            by_id = {item["id"]: item for item in self._items}
            for item in cleaned:
                if item["id"] in by_id:
                    existing = by_id[item["id"]]
                    existing["status"] = item["status"]
                    if item["content"]:
                        existing["content"] = item["content"]
                else:
                    if not item["content"]:
                        raise ToolError(f"todo: new item {item['id']!r} needs a 'content' text.")
                    self._items.append(item)
                    by_id[item["id"]] = item

    def view(self) -> dict[str, Any]:
        items = self.items
        counts = {state: sum(1 for i in items if i["status"] == state) for state in STATES}
        return {"todos": items, "counts": counts}

    def render(self) -> str:
        return "\n".join(f"{MARKS[i['status']]} {i['id']}. {i['content']}" for i in self.items)


def _validate(item: Any, position: int) -> dict[str, str]:
    if not isinstance(item, dict):
        raise ToolError(f"todo: item {position} must be an object with id, content and status.")
    item_id = str(item.get("id") or "").strip()
    if not item_id:
        raise ToolError(f"todo: item {position} has no 'id'; give every item a short unique id.")
    status = item.get("status", "pending")
    if status not in STATES:
        raise ToolError(f"todo: item {item_id!r} has status {status!r}; use one of {', '.join(STATES)}.")
    return {"id": item_id, "content": str(item.get("content") or "").strip(), "status": status}


TODO_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "todos": {
            "type": "array",
            "description": "Items to write: {id, content, status}. Omit to read the list.",
            "items": {"type": "object"},
        },
        "merge": {
            "type": "boolean",
            "description": "true: update items by id and add new ones; false: replace the whole list.",
            "default": False,
        },
    },
}


def todo_tool(todo: TodoList) -> Tool:
    """The agent-level `todo` tool bound to one session's list (not callable from scripts)."""

    def handler(args: dict[str, Any], ctx: ToolContext) -> Any:
        if args.get("todos") is not None:
            todo.write(args["todos"], merge=bool(args.get("merge")))
        return todo.view()

    return Tool(
        name="todo",
        description=(
            "Your task list for this session. Call with no arguments to read it; pass `todos` to "
            "write it (states: pending, in_progress, completed, cancelled). Use it for work with "
            "several steps; keep one item in_progress at a time."
        ),
        parameters=TODO_PARAMETERS,
        handler=handler,
        returns=TodoResult,
        sandbox=False,
        touches=tool_wide("todo"),
        changes_agent_state=True,  # a write changes what the next read returns
    )
