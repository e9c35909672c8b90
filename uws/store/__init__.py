"""Storage: the only package that speaks SQL."""
from .jobs import ListQuery, Store

__all__ = ["ListQuery", "Store"]
