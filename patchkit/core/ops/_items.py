"""The shared engine of call-arg and dict-entry: one keyed item of a comma-separated
sequence (a call's arguments, a dict literal's entries) added, changed or removed.

params.action = "add" (default) | "set" | "remove"
params.value  = the item's value: added, set, or (remove) the value it has upstream
params.expect = (set) the value it has upstream, exactly as upstream writes it
params.after  = the key of the item it follows (add: where it goes, default the end;
                remove: where revert puts it back, default the end)
params.before = ... or the key of the item it precedes

Each container kind says how to find its containers, read an item's key and value, make
a new item and where its opening bracket's whitespace is.
"""

from __future__ import annotations

from typing import Optional

from patchkit.core.ops import AMBIGUOUS, DONE, MISSING, PENDING, Located, Op, OpParamError
from patchkit.core.ops._cst import insert_item, node_tokens, parse_expr, remove_item, replace_node, tokens

ITEM_PARAMS = {"value": "str", "action": "str", "expect": "str", "after": "str", "before": "str"}


class ItemOp(Op):
    """Subclasses set ``field`` (the sequence's attribute), ``noun`` and implement
    containers / key_of / value_of / make / opening."""

    field: str = ""
    noun: str = "item"

    def setup(self, key_src: str, key: tuple, params: dict) -> None:
        self.key_src, self.key = key_src, key
        self.action = params.get("action", "add")
        if self.action not in ("add", "set", "remove"):
            raise OpParamError("params.action", f"must be 'add', 'set' or 'remove', not {self.action!r}")
        if "value" not in params:
            raise OpParamError("params.value", "is required", "the value added, set, or (remove) upstream's value")
        self.value_src = params["value"]
        self.value = parse_expr(self.value_src, "params.value")
        self.value_tok = tokens(self.value_src)
        self.expect_src = params.get("expect")
        if (self.action == "set") != (self.expect_src is not None):
            raise OpParamError("params.expect", "goes with action = 'set' (upstream's value), and only with it")
        self.expect_tok = tokens(self.expect_src) if self.expect_src is not None else None
        if self.expect_tok == self.value_tok:
            raise OpParamError("params.value", "equals params.expect, so the op would change nothing")
        self.after = tokens(params["after"]) if "after" in params else None
        self.before = tokens(params["before"]) if "before" in params else None
        if self.after is not None and self.before is not None:
            raise OpParamError("params.before", "goes instead of params.after, not with it")
        if self.action == "set" and (self.after or self.before) is not None:
            raise OpParamError("params.after", "only goes with add and remove")

    # -- what a subclass gives -------------------------------------------------------------
    def containers(self, scope) -> list:  # pragma: no cover - interface
        raise NotImplementedError

    def key_of(self, container, item) -> Optional[tuple]:  # pragma: no cover - interface
        raise NotImplementedError

    def value_of(self, item):  # pragma: no cover - interface
        raise NotImplementedError

    def make(self, value_src: str):  # pragma: no cover - interface
        raise NotImplementedError

    def opening(self, container):  # pragma: no cover - interface
        return None

    def where(self) -> str:  # pragma: no cover - interface
        raise NotImplementedError

    # -- the face ----------------------------------------------------------------------------
    def _items(self, c) -> tuple:
        return tuple(getattr(c, self.field))

    def _find(self, c) -> list[int]:
        return [i for i, it in enumerate(self._items(c)) if self.key_of(c, it) == self.key]

    def _state(self, c) -> tuple[str, str]:
        """(state, reason) of one container."""
        hits = self._find(c)
        if len(hits) > 1:
            return AMBIGUOUS, f"{self.noun} {self.key_src} stands {len(hits)} times"
        val = node_tokens(self.value_of(self._items(c)[hits[0]])) if hits else None
        if self.action == "add":
            if val is None:
                return PENDING, ""
            return (DONE, "") if val == self.value_tok else (MISSING, f"{self.noun} {self.key_src} has another value")
        if self.action == "remove":
            if val is None:
                return DONE, ""
            if val == self.value_tok:
                return PENDING, ""
            return MISSING, f"{self.noun} {self.key_src} has another value than upstream's `{self.value_src}`"
        if val is None:
            return MISSING, f"{self.noun} {self.key_src} not found"
        if val == self.value_tok:
            return DONE, ""
        if val == self.expect_tok:
            return PENDING, ""
        return MISSING, f"{self.noun} {self.key_src} is neither `{self.expect_src}` (upstream) nor `{self.value_src}`"

    def _one(self, scope):
        cs = self.containers(scope)
        if not cs:
            return Located(MISSING, reason=f"{self.where()} not found")
        if len(cs) > 1:
            return Located(AMBIGUOUS, tuple(cs), f"{self.where()} matches {len(cs)} places")
        return cs[0]

    def locate(self, scope) -> Located:
        c = self._one(scope)
        if isinstance(c, Located):
            return c
        state, why = self._state(c)
        return Located(state, (c,), why)

    def is_applied(self, scope) -> bool:
        # The goal on its own: the one container holds the key with the value (add, set) or not at all (remove).
        cs = self.containers(scope)
        if len(cs) != 1:
            return False
        hits = self._find(cs[0])
        if self.action == "remove":
            return not hits
        return len(hits) == 1 and node_tokens(self.value_of(self._items(cs[0])[hits[0]])) == self.value_tok

    def _position(self, c) -> int:
        items = self._items(c)
        if self.after is None and self.before is None:
            return self.default_position(c)
        want, shift = (self.after, 1) if self.after is not None else (self.before, 0)
        for i, it in enumerate(items):
            if self.key_of(c, it) == want:
                return i + shift
        which = "after" if self.after is not None else "before"
        raise LookupError(f"{self.noun} `{' '.join(map(str, want))}` (params.{which}) not found")

    def default_position(self, c) -> int:
        return len(self._items(c))

    def _with(self, scope, c, items):
        return replace_node(scope, c, c.with_changes(**{self.field: list(items)}))

    def _insert(self, scope, c, value_src):
        items = insert_item(self._items(c), self._position(c), self.make(value_src), self.opening(c))
        return self._with(scope, c, items)

    def _remove(self, scope, c):
        (i,) = self._find(c)
        return self._with(scope, c, remove_item(self._items(c), i))

    def _set(self, scope, c, value):
        (i,) = self._find(c)
        items = list(self._items(c))
        items[i] = self.with_value(items[i], value)
        return self._with(scope, c, items)

    def with_value(self, item, value):
        return item.with_changes(value=value)

    def apply(self, scope):
        c = self._one(scope)
        if self.action == "add":
            return self._insert(scope, c, self.value_src)
        if self.action == "remove":
            return self._remove(scope, c)
        return self._set(scope, c, self.value)

    def revert(self, scope):
        c = self._one(scope)
        if self.action == "add":
            return self._remove(scope, c)
        if self.action == "remove":
            return self._insert(scope, c, self.value_src)
        return self._set(scope, c, parse_expr(self.expect_src, "params.expect"))
