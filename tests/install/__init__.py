"""Fresh-install checks: Herald installed with the minimum versions it declares (lowest_deps.py),
and a smoke run of every runtime extra in that install (smoke.py)."""
