"""Turn Playwright's AI-mode aria snapshot into the text the model reads, with refs @e1, @e2, ….

Playwright gives every element of its snapshot a ref (`[ref=e17]`, `[ref=f1e3]` inside frames) and
resolves it with the `aria-ref=` selector. The model only needs refs on what it can act on, so
interactive elements (links, buttons, fields, ... and anything drawn with a pointer cursor) get
our own short numbering and the rest lose theirs. The compact view (the default) also folds away
unnamed structural wrappers (generic, group, rowgroup, ...), lifting their children a level, which
typically halves the text without losing anything a model reads or clicks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import BrowserError

INTERACTIVE_ROLES = frozenset(
    {
        "button", "checkbox", "combobox", "link", "listbox", "menuitem", "menuitemcheckbox",
        "menuitemradio", "option", "radio", "scrollbar", "searchbox", "slider", "spinbutton",
        "switch", "tab", "textbox", "treeitem",
    }
)
# Unnamed, text-less nodes of these roles only group their children.
STRUCTURAL_ROLES = frozenset({"generic", "group", "none", "presentation", "rowgroup", "main", "section"})

_LINE = re.compile(
    r'^(?P<indent> *)- (?P<role>[^\s":\[]+)'
    r'(?P<name> "(?:[^"\\]|\\.)*")?'
    r"(?P<attrs>(?: \[[^\]]*\])*)"
    r"(?P<rest>:.*)?$"
)
_ATTR = re.compile(r" \[([^\]]*)\]")
_DROPPED_ATTRS = ("ref=", "cursor=", "active")
_REF = re.compile(r"^@?e(\d+)$")


@dataclass
class Snapshot:
    text: str
    refs: dict[str, str] = field(default_factory=dict)  # "@e1" -> Playwright's aria ref


def render(aria: str, *, full: bool = False) -> Snapshot:
    """The model's view of `aria` (Playwright's `aria_snapshot(mode="ai")` text)."""
    refs: dict[str, str] = {}
    out: list[str] = []
    folded: list[int] = []  # indents of folded ancestors of the current line
    for line in aria.splitlines():
        match = _LINE.match(line)
        if match is None:  # a continuation or a form we do not know: keep it, minus refs
            out.append(_ATTR.sub(lambda m: "" if m.group(1).startswith("ref=") else m.group(0), line))
            continue
        indent = len(match["indent"])
        while folded and folded[-1] >= indent:
            folded.pop()
        attrs = _ATTR.findall(match["attrs"] or "")
        role, name, rest = match["role"], match["name"] or "", match["rest"] or ""
        aria_ref = next((a[4:] for a in attrs if a.startswith("ref=")), None)
        interactive = aria_ref is not None and (role in INTERACTIVE_ROLES or "cursor=pointer" in attrs)
        has_text = rest not in ("", ":")
        if not full and not interactive and role in STRUCTURAL_ROLES and not name and not has_text:
            folded.append(indent)  # children move up one level; a childless one just disappears
            continue
        kept = "".join(f" [{a}]" for a in attrs if not a.startswith(_DROPPED_ATTRS))
        ref_text = ""
        if interactive and aria_ref is not None:
            ref = f"@e{len(refs) + 1}"
            refs[ref] = aria_ref
            ref_text = f" {ref}"
        pad = " " * max(0, indent - 2 * len(folded))
        out.append(f"{pad}- {role}{name}{kept}{ref_text}{rest}")
    text = "\n".join(out)
    return Snapshot(text or "(the page is empty)", refs)


def normalize_ref(ref: str) -> str:
    """`@e3`, `e3` -> `@e3`; anything else is an error that shows the form."""
    match = _REF.match(ref.strip())
    if match is None:
        raise BrowserError(
            f"{ref!r} is not an element ref. Refs look like @e3: take them from the latest "
            "browser_snapshot() text.",
            "BadRef",
        )
    return f"@e{int(match.group(1))}"
