"""A certificate file checked the same way on both sides: the server's and the node's CA.

`check_certificate` gives one line naming the file for what TLS would otherwise
report deep inside a handshake (or only in a SuperLink's log): a file that cannot
be read, is not a PEM certificate, has expired or is not valid yet.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from cryptography import x509

from schemas.errors import BadInputError


def check_certificate(path: Path, what: str, now: dt.datetime | None = None) -> x509.Certificate:
    """The certificate at `path`; BadInputError unless it is PEM and valid at `now`."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadInputError(f"{path}: cannot read the {what} ({exc.strerror})") from None
    try:
        cert = x509.load_pem_x509_certificate(data)
    except ValueError:
        raise BadInputError(f"{path}: the {what} is not a PEM certificate") from None
    now = now or dt.datetime.now(dt.timezone.utc)
    if cert.not_valid_after_utc < now:
        raise BadInputError(
            f"{path}: the {what} expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
        )
    if cert.not_valid_before_utc > now:
        raise BadInputError(
            f"{path}: the {what} is not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
        )
    return cert
