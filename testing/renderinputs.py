"""Plain render inputs of one runtime for the enroller's render tests (no plane, no
process): the shipped bundle and placeholder certificates, keys and image."""

from __future__ import annotations

from enroller import render

BUNDLE = render.load_bundle(render.BUNDLE_FILE.read_text())
INPUTS = render.Inputs(
    runtime_id="rt-1",
    listener_url="https://l.example.com",
    listener_ca=b"LCA",
    client_cert=b"CERT",
    client_key=b"KEY-SECRET",
    client_serial="a1",
    serving_cert=b"SCERT",
    serving_key=b"SKEY-SECRET",
    serving_serial="b2",
    serving_not_after="2027-01-01T00:00:00Z",
    ca_bundle=b"CA",
    image="reg.example.com/tether:9.9",
)
