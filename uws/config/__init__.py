"""The configuration: the TOML file and the UWS_* variables read strictly (settings, with
the demo services) into the dataclasses that declare their shape (shapes).  An adapter: it
may import uws.domain, uws.usecases, uws.auth and other adapters (uws.http.hosts)."""
