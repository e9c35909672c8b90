"""An IVOA UWS 1.1 job server.

Its layers import only themselves and those below: the entry points (this module, cli,
web, client), the adapters (store, execution, render, http, config), the use cases
(usecases) and the domain (README.rst, "Architecture").  This module holds only
create_app, which imports the web application when it is called."""
__version__ = "0.1.0"


def create_app(config=None):
    """The WSGI application (``gunicorn 'uws:create_app()'``)."""
    from .web.app import create_app as _create_app
    return _create_app(config)
