"""The Flask application: routing, request parsing, content negotiation, forms and pages.
An entry point: it may import every layer below (adapters, use cases, domain)."""
