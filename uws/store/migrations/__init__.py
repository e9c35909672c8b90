"""Alembic migrations of the store's schema, run by uws.store.schema (no alembic.ini).

A new revision: change uws/store/tables.py, then from the checkout
``python -m uws.store.migrations "what changed"`` autogenerates one in versions/.
"""
