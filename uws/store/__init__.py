"""Storage: the only package that speaks SQL."""
from ..domain.model import ListQuery  # where list filters were first defined
from .jobs import Store

__all__ = ["ListQuery", "Store"]
