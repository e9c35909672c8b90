"""An IVOA UWS 1.1 job server."""
__version__ = "0.1.0"


def create_app(config=None):
    """The WSGI application (``gunicorn 'uws:create_app()'``)."""
    from .web.app import create_app as _create_app
    return _create_app(config)
