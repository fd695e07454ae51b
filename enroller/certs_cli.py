"""``tether certs``: the watcher CA and the certificates it issues, by hand (operators).

    tether certs create-ca --out DIR [--name N] [--days D] [--force]
    tether certs issue RUNTIME_ID --domain D --ca-dir DIR --out DIR [--hours H] [--force]
    tether certs serving DNS [DNS ...] --ca-dir DIR --out DIR [--hours H] [--force]
    tether certs inspect FILE [-o text|json]
    tether certs check FILE --ca CA_FILE [--runtime-id ID] [--domain D]

``create-ca`` writes ``ca.crt`` and ``ca.key``; ``issue`` (a runtime's client certificate)
and ``serving`` (the webhook's serving certificate) read them from ``--ca-dir`` and write
``tls.crt`` and ``tls.key``. Keys are written with mode 0600 and never printed; existing
files are kept unless ``--force``. The decisions are ``enroller.pki``'s, the same the enroller
makes (docs/enroller.md, "Certificates").

Exit codes: 0 done (``check``: the certificate may stay), 1 (``check`` only) it needs
renewal, 2 a problem, reported as one line ``tether certs: <problem>`` on stderr.

Adding a command: one ``_add_<name>(commands)`` that adds a subparser with a ``run``
handler ``(args) -> int``; a handler reports a problem by raising ``Problem`` or
``pki.PKIError``. ``add_render`` is the place of ``tether certs render`` (below).
"""

from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeAlias

from cryptography import x509

from enroller import pki
from tether.base import certs

PROG = "tether certs"
Commands: TypeAlias = "argparse._SubParsersAction[_Parser]"  # the commands of tether certs
Handler = Callable[[argparse.Namespace], int]

REASONS = {
    "missing": "no certificate",
    "unreadable": "not a PEM certificate",
    "foreign_issuer": "not signed by the given CA",
    "subject_changed": "its CN or SANs differ from --runtime-id/--domain",
    "expired": "it has expired",
    "expiring": "it is past its renewal time",
}


class Problem(Exception):
    """Something ``tether certs`` cannot do; the message is the line printed."""


class _Parser(argparse.ArgumentParser):
    """Argument errors as ``Problem`` (one line, exit 2) rather than usage and exit."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix(PROG).strip()
        raise Problem(f"{command}: {message}" if command else message)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _count(unit: str, maximum: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        if not raw.isascii() or not raw.isdigit() or not 0 < int(raw) <= maximum:
            raise argparse.ArgumentTypeError(f"{raw!r} is not a number of {unit} (1..{maximum})")
        return int(raw)

    return parse


# -- files --------------------------------------------------------------------------------


def _read(path: pathlib.Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise Problem(f"cannot read {path}: {e.strerror or e}") from None


def _read_ca(directory: pathlib.Path) -> certs.CertificateAuthority:
    cert, key = directory / "ca.crt", directory / "ca.key"
    return pki.load_ca(_read(cert), _read(key), str(cert), str(key))


def _write(
    pair: certs.KeyPair, out: pathlib.Path, cert_name: str, key_name: str, force: bool
) -> tuple[pathlib.Path, pathlib.Path]:
    """Write the pair (the key with mode 0600); refuse to replace a file unless ``force``.
    A replaced file is removed first, so a new key file never inherits an old mode."""
    cert_path, key_path = out / cert_name, out / key_name
    try:
        out.mkdir(mode=0o700, parents=True, exist_ok=True)
        existing = [p for p in (cert_path, key_path) if p.exists() or p.is_symlink()]
        if existing and not force:
            raise Problem(f"{existing[0]} exists (--force replaces it)")
        for p in existing:
            p.unlink()
        pair.write(cert_path, key_path)
    except OSError as e:
        raise Problem(f"cannot write to {out}: {e.strerror or e}") from None
    return cert_path, key_path


def _wrote(cert_path: pathlib.Path, key_path: pathlib.Path, cert: x509.Certificate) -> None:
    d = pki.describe(cert, _now())
    what = (
        ["a CA"]
        if d["is_ca"]
        else [
            f"DNS {', '.join(d['dns_names']) or '-'}",
            "/".join(d["extended_key_usages"]) or "no key usage",
        ]
    )
    print(
        f"wrote {cert_path} and {key_path} (mode 0600): "
        + ", ".join(
            [
                f"CN {d['subject_cn']}",
                *what,
                f"valid until {d['not_after']}",
                f"renew at {d['renew_at']}",
            ]
        )
    )


# -- commands -----------------------------------------------------------------------------


def _add_create_ca(commands: Commands) -> None:
    p = commands.add_parser(
        "create-ca",
        help="create a watcher CA: ca.crt, ca.key",
        description="Create a self-signed CA (EC P-256) and write "
        "DIR/ca.crt and DIR/ca.key (mode 0600).",
    )
    p.add_argument("--out", required=True, type=pathlib.Path, metavar="DIR")
    p.add_argument("--name", default="tether-watcher-ca", help="its CN (default: %(default)s)")
    p.add_argument(
        "--days",
        type=_count("days", 36500),
        default=pki.DEFAULT_CA_LIFETIME.days,
        help="validity (default: %(default)s)",
    )
    p.add_argument("--force", action="store_true", help="replace existing files")
    p.set_defaults(run=_create_ca)


def _create_ca(args: argparse.Namespace) -> int:
    if not 0 < len(args.name) <= 64 or not args.name.isprintable():
        raise Problem(f"--name: {args.name!r} is not a CN (1-64 printable characters)")
    ca = certs.CertificateAuthority.create(args.name, datetime.timedelta(days=args.days))
    _wrote(*_write(ca, args.out, "ca.crt", "ca.key", args.force), ca.cert)
    return 0


def _leaf_options(p: argparse.ArgumentParser, default: datetime.timedelta) -> None:
    p.add_argument(
        "--ca-dir",
        required=True,
        type=pathlib.Path,
        metavar="DIR",
        help="where ca.crt and ca.key are (tether certs create-ca)",
    )
    p.add_argument(
        "--out",
        required=True,
        type=pathlib.Path,
        metavar="DIR",
        help="where to write tls.crt and tls.key (mode 0600)",
    )
    p.add_argument(
        "--hours",
        type=_count("hours", 87600),
        default=int(default.total_seconds() // 3600),
        help="lifetime (default: %(default)s)",
    )
    p.add_argument("--force", action="store_true", help="replace existing files")


def _add_issue(commands: Commands) -> None:
    p = commands.add_parser(
        "issue",
        help="issue a runtime's client certificate",
        description="Issue a runtime's client certificate: CN = "
        "RUNTIME_ID, one DNS SAN = the Kyma CR's skr-domain, clientAuth.",
    )
    p.add_argument("runtime_id", metavar="RUNTIME_ID")
    p.add_argument("--domain", required=True, help="the Kyma CR's skr-domain")
    _leaf_options(p, pki.DEFAULT_CLIENT_LIFETIME)
    p.set_defaults(run=_issue)


def _issue(args: argparse.Namespace) -> int:
    ca = _read_ca(args.ca_dir)
    pair = pki.client_certificate(
        ca, args.runtime_id, args.domain, datetime.timedelta(hours=args.hours), _now()
    )
    _wrote(*_write(pair, args.out, "tls.crt", "tls.key", args.force), pair.cert)
    return 0


def _add_serving(commands: Commands) -> None:
    p = commands.add_parser(
        "serving",
        help="issue the webhook's serving certificate",
        description="Issue a serving certificate for the DNS names "
        "(the webhook Service's, e.g. tether-webhook.tether-system.svc), "
        "serverAuth.",
    )
    p.add_argument("dns_names", nargs="+", metavar="DNS")
    _leaf_options(p, pki.DEFAULT_SERVING_LIFETIME)
    p.set_defaults(run=_serving)


def _serving(args: argparse.Namespace) -> int:
    ca = _read_ca(args.ca_dir)
    pair = pki.serving_certificate(ca, args.dns_names, datetime.timedelta(hours=args.hours), _now())
    _wrote(*_write(pair, args.out, "tls.crt", "tls.key", args.force), pair.cert)
    return 0


def _add_inspect(commands: Commands) -> None:
    p = commands.add_parser(
        "inspect",
        help="show a certificate (each one of a bundle)",
        description="Show the certificates of a PEM file: names, "
        "issuer, validity, usages. Never key material.",
    )
    p.add_argument("file", type=pathlib.Path, metavar="FILE")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.set_defaults(run=_inspect)


def _inspect(args: argparse.Namespace) -> int:
    now = _now()
    found = [pki.describe(c, now) for c in pki.load_certificates(_read(args.file), str(args.file))]
    if args.output == "json":
        print(json.dumps(found, indent=2))
        return 0
    blocks = []
    for i, d in enumerate(found, 1):
        head = [f"certificate {i} of {len(found)}"] if len(found) > 1 else []
        blocks.append("\n".join(head + _text(d)))
    print("\n\n".join(blocks))
    return 0


def _text(d: dict[str, Any]) -> list[str]:
    left = d["days_left"]
    when = f"{left} days left" if left > 0 else f"expired {-left} days ago"
    rows = [
        ("subject CN", d["subject_cn"] or "-"),
        ("DNS names", ", ".join(d["dns_names"]) or "-"),
        ("IP addresses", ", ".join(d["ip_addresses"]) or "-"),
        ("issuer CN", d["issuer_cn"] or "-"),
        ("serial", d["serial"]),
        ("not before", d["not_before"]),
        ("not after", f"{d['not_after']} ({when})"),
        ("renew at", d["renew_at"]),
        ("key usages", ", ".join(d["extended_key_usages"]) or "-"),
        ("CA", "yes" if d["is_ca"] else "no"),
        ("sha256", d["sha256"]),
    ]
    return [f"  {k:<13} {v}" for k, v in rows]


def _add_check(commands: Commands) -> None:
    p = commands.add_parser(
        "check",
        help="does a certificate need renewal? (exit 1: yes)",
        description="Say whether the certificate in FILE needs renewal "
        "by the enroller's rules: exit 0 when it may stay, 1 when not.",
    )
    p.add_argument("file", type=pathlib.Path, metavar="FILE")
    p.add_argument(
        "--ca",
        required=True,
        type=pathlib.Path,
        metavar="CA_FILE",
        help="the CA certificate(s) it must be signed by (a bundle: any of them)",
    )
    p.add_argument("--runtime-id", help="the CN it must have")
    p.add_argument("--domain", help="the one DNS SAN it must have")
    p.set_defaults(run=_check)


def _check(args: argparse.Namespace) -> int:
    pem = _read(args.file)
    cert = pki.load_certificates(pem, str(args.file))[0]
    cas = pki.load_certificates(_read(args.ca), str(args.ca))
    reason = pki.needs_renewal(pem, cas, _now(), runtime_id=args.runtime_id, domain=args.domain)
    d = pki.describe(cert, _now())
    times = f"renew at {d['renew_at']}, expires {d['not_after']}"
    if reason is None:
        print(f"{args.file}: ok ({times})")
        return 0
    print(f"{args.file}: needs renewal: {reason}: {REASONS[reason]} ({times})")
    return 1


def add_render(commands: Commands) -> None:
    """``tether certs render RUNTIME_ID``: the SKR objects for one runtime, as the enroller
    would install them, to stdout for ``kubectl apply -f -`` (the manual path for a runtime
    the KCP cannot reach). Fresh client and serving certificates from the CA in
    ``--ca-dir``; the Secrets hold the keys, so the output is as secret as they are."""
    p = commands.add_parser(
        "render",
        help="the SKR objects of one runtime, for kubectl apply -f -",
        description=add_render.__doc__,
    )
    p.add_argument("runtime_id", metavar="RUNTIME_ID")
    p.add_argument("--domain", required=True, help="the Kyma CR's skr-domain")
    p.add_argument(
        "--ca-dir", type=pathlib.Path, required=True, help="folder with ca.crt and ca.key"
    )
    p.add_argument(
        "--listener-url", required=True, help="the listener's URL as the runtime reaches it"
    )
    p.add_argument(
        "--listener-ca",
        type=pathlib.Path,
        required=True,
        help="CA file of the listener's serving certificate",
    )
    p.add_argument(
        "--image", default=None, help="image of Tether's SKR containers (default: the bundle's)"
    )
    p.add_argument(
        "--bundle",
        type=pathlib.Path,
        default=None,
        help="the SKR bundle (default: the packaged manifests/skr)",
    )
    p.add_argument(
        "--hours",
        type=_count("hours", 397 * 24),
        default=int(pki.DEFAULT_CLIENT_LIFETIME.total_seconds() // 3600),
        help="lifetime of both certificates",
    )
    p.set_defaults(run=_render)


def _render(args: argparse.Namespace) -> int:
    import yaml

    from enroller import render
    from tether.base import times

    if not args.listener_url.startswith("https://"):
        raise Problem(f"--listener-url: {args.listener_url!r} is not an https:// URL")
    ca = _read_ca(args.ca_dir)
    listener_ca = _read(args.listener_ca)
    pki.load_certificates(listener_ca, str(args.listener_ca))
    try:
        bundle = render.load_bundle(_read(args.bundle or render.BUNDLE_FILE).decode())
    except (render.BundleError, UnicodeDecodeError) as e:
        raise Problem(f"--bundle: {e}") from None
    now, life = _now(), datetime.timedelta(hours=args.hours)
    client = pki.client_certificate(ca, args.runtime_id, args.domain, life, now)
    serving = pki.serving_certificate(ca, list(render.WEBHOOK_SERVICE_NAMES), life, now)
    objs = render.render(
        bundle,
        render.Inputs(
            runtime_id=args.runtime_id,
            listener_url=args.listener_url,
            listener_ca=listener_ca,
            client_cert=client.cert_pem,
            client_key=client.key_pem,
            client_serial=format(client.cert.serial_number, "x"),
            serving_cert=serving.cert_pem,
            serving_key=serving.key_pem,
            serving_serial=format(serving.cert.serial_number, "x"),
            serving_not_after=times.format_time(certs.not_after(serving.cert)),
            serving_renew_at=times.format_time(pki.renew_at(serving.cert)),
            ca_bundle=ca.cert_pem,
            image=args.image,
            digest_key=render.new_digest_key(),
        ),
    )
    sys.stdout.write(yaml.safe_dump_all(objs, sort_keys=False))
    print(
        f"tether certs: rendered {len(objs)} objects for {args.runtime_id} "
        "(client certificate valid "
        f"until {times.format_time(certs.not_after(client.cert))}); "
        "the output holds private keys",
        file=sys.stderr,
    )
    return 0


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="The watcher CA and the certificates it issues, by "
        "hand (operators); the same decisions the enroller makes.",
        epilog="Exit codes: 0 done or the certificate may stay, 1 (check) it "
        "needs renewal, 2 a problem (one line on stderr).",
    )
    commands = p.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    for add in (_add_create_ca, _add_issue, _add_serving, _add_inspect, _add_check, add_render):
        add(commands)
    return p


def main(argv: Sequence[str]) -> int:
    try:
        args = parser().parse_args(list(argv))
    except SystemExit as e:  # --help printed its text
        return e.code if isinstance(e.code, int) else 0
    except Problem as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    run: Handler = args.run
    try:
        return run(args)
    except (Problem, pki.PKIError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
