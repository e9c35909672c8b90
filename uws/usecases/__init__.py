"""The use cases: what clients, administrators and the sweeps do to jobs, and the ports
(uws.usecases.ports, Protocols) through which they reach storage, files and executors.
They import uws.domain and each other, never an adapter: no Flask, no SQL."""
