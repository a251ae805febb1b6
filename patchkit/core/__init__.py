"""The core: from recipes to bytes on disk.

- recipes are read in ``recipe.py`` (the catalog and the project in ``project.py``, ``pins.py``);
- an op lives in ``ops/`` (one module per op kind, one face: locate, apply, revert, is_applied);
- verdicts are decided in ``judge.py`` (with the site's identity: ``identity.py``, ``context.py``);
- the plan is made in ``planner.py`` (every edit made in memory and checked);
- bytes hit the disk in ``transaction.py`` (one commit point, all or nothing).

The core imports only ``patchkit.base``; what it needs of upstream (pristine releases) is
handed to it."""
