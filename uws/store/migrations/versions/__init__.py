"""Alembic revision scripts (alembic loads them by path and skips this file)."""
