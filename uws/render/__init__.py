"""Representations of jobs: XML (lxml) and JSON; HTML lives in templates/.  An adapter:
it may import uws.domain, uws.usecases and other adapters."""
