"""``tether admin``: the admin pages (KCP). Settings: ``tether admin --help``, docs/admin.md;
a bad one stops the process with one line naming it."""

from __future__ import annotations

from admin import server
from admin import settings as settings_mod
from tether.base import config, logs
from tether.kube import gateway


def main(argv: list[str]) -> int:
    s, _ = config.load(settings_mod.SPEC, argv, settings_mod.build)
    logs.configure(s.log_level, s.log_format)
    gateway.identify("admin")
    server.Server(s).run()
    return 0
