"""HTTP layer: routing, request parsing and content negotiation."""
