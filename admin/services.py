"""The admin app's dependency bag: built once by the factory (``admin.app.create_app``), put
on ``app.extensions[KEY]``, read by the hooks and routes through ``current()``."""

from __future__ import annotations

import logging
from typing import NamedTuple

import flask

from admin import auth, metrics, proxyauth, sessions, snapshot
from admin import settings as settings_mod
from tether.kube import gateway

KEY = "tether.admin"


class Services(NamedTuple):
    settings: settings_mod.Settings
    kcp: gateway.Kube
    refresher: snapshot.Refresher
    authorizer: auth.Authorizer
    metrics: metrics.Metrics
    audit: logging.Logger
    events: snapshot.Events
    sessions: sessions.Sessions
    proxy: proxyauth.Trust | None  # None: no proxy trusted (admin.proxyauth)


def current() -> Services:
    """The current app's services (in a request or app context)."""
    svc = flask.current_app.extensions[KEY]
    assert isinstance(svc, Services)
    return svc
