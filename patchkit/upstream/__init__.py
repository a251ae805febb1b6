"""Knowledge of upstream: the package index (``fetch.py``), pristine releases (``pristine.py``),
git sources, drift across releases (``drift.py``, its HTML report) and the gates a release
keeps closed for a device (``gates.py``).  Porting a recipe to a release is authoring
(patchkit/authoring/port.py): it uses this package, never the other way round."""
