"""HTTP without Flask: the hardened waitress server of ``uws serve`` (server, bodies), the
host names it answers to (hosts), and outgoing connections pinned to checked addresses
(pinned).  An adapter: it may import uws.domain, uws.usecases and other adapters; nothing
here loads waitress until server or bodies is imported (a job's fetch imports pinned)."""
