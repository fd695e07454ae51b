"""The listener's HTTP edge: the Flask app and its routes (``app``, ``api``, ``stateapi``),
the gunicorn server and worker (``server``, ``worker``), the checks of a request (``peer``,
``auth``, ``validation``, ``ratelimit``, ``budget``), its answers, OpenAPI document and
metrics, and the ``Services`` bag the routes use."""
