"""Storage: the only package that speaks SQL (Store implements uws.usecases.ports with
SQLAlchemy).  An adapter: it may import uws.domain, uws.usecases and other adapters."""
from ..domain.model import ListQuery  # where list filters were first defined
from .jobs import Store

__all__ = ["ListQuery", "Store"]
