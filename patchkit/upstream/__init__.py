"""Knowledge of upstream: the package index (``fetch.py``), pristine releases (``pristine.py``),
git sources, drift across releases (``drift.py``, its HTML report) and porting a recipe to a
new release (``port.py``)."""
