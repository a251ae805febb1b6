"""The shapes of what patchkit reads back from its own caches, checked before use.

A cache entry is input like any other (another user of a shared cache, a disk that tore a
write, an older patchkit): one that parses but has the wrong shape is a miss, told apart
here rather than by catching whatever its use would raise, which would hide patchkit's own
bugs too.  A schema is data:

* a type: an instance of it (``bool`` is not an ``int``);
* ``None``: None;
* a tuple: any one of its alternatives;
* a frozenset: one of these strings;
* ``[schema]``: a list whose every item fits;
* ``{str: schema}``: a dict of string keys whose every value fits;
* ``{"key": schema, ...}``: a dict holding at least these keys, each fitting.

Standard library only: ``status`` checks its cached verdicts with it at start-up.
"""

from __future__ import annotations

from patchkit.base.states import State


def fits(value, schema) -> bool:
    if schema is None:
        return value is None
    if isinstance(schema, tuple):
        return any(fits(value, s) for s in schema)
    if isinstance(schema, frozenset):
        return isinstance(value, str) and value in schema
    if isinstance(schema, type):
        return isinstance(value, schema) and (schema is bool or not isinstance(value, bool))
    if isinstance(schema, list):
        return isinstance(value, list) and all(fits(v, schema[0]) for v in value)
    if not isinstance(value, dict):
        return False
    if list(schema) == [str]:
        return all(isinstance(k, str) and fits(v, schema[str]) for k, v in value.items())
    return all(k in value and fits(value[k], s) for k, s in schema.items())


STATES = frozenset(s.value for s in State)
NUMBER = (int, float)
DIGEST = (str, None)  # a file's digest, or None: it was not there

# results.OpResult.to_json and RecipeResult.to_json (verdicts, drift)
OP_RESULT = {
    "index": int,
    "kind": str,
    "engine": str,
    "file": str,
    "state": STATES,
    "line": (int, None),
    "location": str,
    "message": str,
}
RECIPE_RESULT = {
    "id": str,
    "state": STATES,
    "in_range": (bool, None),
    "versions": {str: (str, None)},
    "message": str,
    "blockers": [dict],
    "ops": [OP_RESULT],
}
RESULTS = [RECIPE_RESULT]

# verdicts.save's entry: the digests it is valid for, and the results
VERDICTS = {
    "files": {str: DIGEST},
    "trees": {str: str},
    "provenance": {str: DIGEST},
    "results": RESULTS,
}
UNREADABLE = "unreadable"  # the "digest" of something there that cannot be read as a file
