"""TLS contexts from Kafka's `ssl.*` settings (per listener: `listener.name.<l>.ssl.*` first).

Key stores: `ssl.keystore.type=PEM` (a file holding the private key and its certificate
chain at `ssl.keystore.location`, or the PEM text itself in `ssl.keystore.key` and
`ssl.keystore.certificate.chain`) and `PKCS12` (read with `cryptography`). Trust stores: PEM
(`ssl.truststore.location`, or `ssl.truststore.certificates` inline) and PKCS12. JKS, Kafka's
default, is Java's own format: a listener that needs it refuses to start with a line saying so.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography.x509 import Certificate

SSL_CLIENT_AUTH = ("required", "requested", "none")
_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


class TlsConfigError(ValueError):
    """A TLS setting that cannot be used; the message names the key."""


def listener_value(props: Mapping[str, str], listener: str, key: str) -> str | None:
    """Kafka's per-listener override `listener.name.<listener lowercased>.<key>`, else `key`."""
    prefixed = props.get(f"listener.name.{listener.lower()}.{key}")
    if prefixed is not None:
        return prefixed
    return props.get(key)


def _key_name(props: Mapping[str, str], listener: str, key: str) -> str:
    prefixed = f"listener.name.{listener.lower()}.{key}"
    return prefixed if prefixed in props else key


def _unloadable(
    store: str, props: Mapping[str, str], listener: str, key: str, e: Exception
) -> TlsConfigError:
    """The error of a key or trust store (`store`, located by `key`) ssl could not load."""
    return TlsConfigError(
        f"cannot load the {store} of listener {listener} ({_key_name(props, listener, key)}): {e}"
    )


def _store_type(props: Mapping[str, str], listener: str, key: str) -> str:
    value = (listener_value(props, listener, key) or "JKS").strip().upper()
    if value not in ("PEM", "PKCS12"):
        raise TlsConfigError(
            f"{_key_name(props, listener, key)}={value} is not supported: wherry reads PEM and "
            "PKCS12 stores (JKS is Java's own format; convert it with keytool -importkeystore "
            "-deststoretype PKCS12)"
        )
    return value


def _write_private(dirname: str, name: str, data: bytes) -> str:
    path = os.path.join(dirname, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def _pkcs12_pem(data: bytes, password: str | None, key: str) -> tuple[bytes, bytes | None]:
    """(certificate chain PEM, private key PEM or None) of a PKCS12 store."""
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
        pkcs12,
    )

    try:
        private_key, cert, extra = pkcs12.load_key_and_certificates(
            data, password.encode() if password else None
        )
    except ValueError as e:
        raise TlsConfigError(f"cannot read the PKCS12 store of {key}: {e}") from e
    certs = ([cert] if cert is not None else []) + list(extra or [])
    chain = b"".join(c.public_bytes(Encoding.PEM) for c in certs)
    key_pem = (
        None
        if private_key is None
        else private_key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    )
    return chain, key_pem


def _read(props: Mapping[str, str], listener: str, key: str) -> bytes:
    location = listener_value(props, listener, key)
    assert location is not None
    try:
        return Path(location).read_bytes()
    except OSError as e:
        raise TlsConfigError(
            f"cannot read {_key_name(props, listener, key)} ({location}): {e}"
        ) from e


def _load_key_store(ctx: ssl.SSLContext, props: Mapping[str, str], listener: str) -> bool:
    """Load the key store into `ctx`; False when none is configured."""
    get = lambda k: listener_value(props, listener, k)  # noqa: E731
    location = get("ssl.keystore.location")
    inline_key, inline_chain = get("ssl.keystore.key"), get("ssl.keystore.certificate.chain")
    if location is None and inline_key is None and inline_chain is None:
        return False
    kind = _store_type(props, listener, "ssl.keystore.type")
    key_password = get("ssl.key.password")
    import tempfile  # only with a key store

    with tempfile.TemporaryDirectory(prefix="wherry-tls-") as tmp:
        if kind == "PKCS12":
            if location is None:
                raise TlsConfigError(
                    f"{_key_name(props, listener, 'ssl.keystore.type')}=PKCS12 needs "
                    "ssl.keystore.location"
                )
            chain, key_pem = _pkcs12_pem(
                _read(props, listener, "ssl.keystore.location"),
                get("ssl.keystore.password"),
                _key_name(props, listener, "ssl.keystore.location"),
            )
            if key_pem is None:
                raise TlsConfigError(f"the PKCS12 key store {location} holds no private key")
            certfile = _write_private(tmp, "chain.pem", chain)
            keyfile: str | None = _write_private(tmp, "key.pem", key_pem)
            key_password = None
        elif location is not None:
            certfile = str(location)
            keyfile = None
            _read(props, listener, "ssl.keystore.location")  # a clear error when unreadable
        else:
            if not inline_key or not inline_chain:
                raise TlsConfigError(
                    "ssl.keystore.key and ssl.keystore.certificate.chain go together "
                    f"(listener {listener})"
                )
            certfile = _write_private(tmp, "chain.pem", inline_chain.encode())
            keyfile = _write_private(tmp, "key.pem", inline_key.encode())
        try:
            ctx.load_cert_chain(certfile, keyfile, password=key_password)
        except (ssl.SSLError, OSError) as e:
            raise _unloadable("key store", props, listener, "ssl.keystore.location", e) from e
    return True


def _load_trust_store(ctx: ssl.SSLContext, props: Mapping[str, str], listener: str) -> bool:
    get = lambda k: listener_value(props, listener, k)  # noqa: E731
    location, inline = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    if location is None and inline is None:
        return False
    try:
        if inline is not None:
            ctx.load_verify_locations(cadata=inline)
            return True
        kind = _store_type(props, listener, "ssl.truststore.type")
        data = _read(props, listener, "ssl.truststore.location")
        if kind == "PKCS12":
            chain, _ = _pkcs12_pem(
                data,
                get("ssl.truststore.password"),
                _key_name(props, listener, "ssl.truststore.location"),
            )
            ctx.load_verify_locations(cadata=chain.decode())
        else:
            ctx.load_verify_locations(cadata=data.decode())
    except (ssl.SSLError, ValueError, UnicodeDecodeError) as e:
        if isinstance(e, TlsConfigError):
            raise
        raise _unloadable("trust store", props, listener, "ssl.truststore.location", e) from e
    return True


def _protocols(ctx: ssl.SSLContext, props: Mapping[str, str], listener: str) -> None:
    value = listener_value(props, listener, "ssl.enabled.protocols") or "TLSv1.2,TLSv1.3"
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in _PROTOCOLS]
    if unknown or not names:
        raise TlsConfigError(
            f"{_key_name(props, listener, 'ssl.enabled.protocols')}={value}: supported "
            f"protocols are {', '.join(_PROTOCOLS)}"
        )
    versions = sorted(_PROTOCOLS[n] for n in names)
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]


def client_auth(props: Mapping[str, str], listener: str) -> str:
    value = (listener_value(props, listener, "ssl.client.auth") or "none").strip().lower()
    if value not in SSL_CLIENT_AUTH:
        raise TlsConfigError(
            f"Invalid value {value} for configuration "
            f"{_key_name(props, listener, 'ssl.client.auth')}: String must be one of: "
            + ", ".join(SSL_CLIENT_AUTH)
        )
    return value


def key_store_certificate(props: Mapping[str, str], listener: str) -> Certificate | None:
    """The certificate of a listener's key store (the chain's first), None without a key
    store."""
    from cryptography import x509

    get = lambda k: listener_value(props, listener, k)  # noqa: E731
    location, inline = get("ssl.keystore.location"), get("ssl.keystore.certificate.chain")
    if location is None and inline is None:
        return None
    if _store_type(props, listener, "ssl.keystore.type") == "PKCS12":
        chain, _ = _pkcs12_pem(
            _read(props, listener, "ssl.keystore.location"),
            get("ssl.keystore.password"),
            _key_name(props, listener, "ssl.keystore.location"),
        )
    else:
        chain = (
            _read(props, listener, "ssl.keystore.location")
            if location is not None
            else (inline or "").encode()
        )
    try:
        certs = x509.load_pem_x509_certificates(chain)
    except ValueError as e:
        raise TlsConfigError(f"no certificate in the key store of listener {listener}") from e
    return certs[0]


def reload_stores(ctx: ssl.SSLContext, props: Mapping[str, str], listener: str) -> None:
    """Load a listener's key store (and trust store, whose certificates are added) into its
    context again (KIP-226): new connections are served with them, open ones keep theirs."""
    _load_key_store(ctx, props, listener)
    _load_trust_store(ctx, props, listener)


def server_context(props: Mapping[str, str], listener: str) -> ssl.SSLContext:
    """The context of an SSL or SASL_SSL listener."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _protocols(ctx, props, listener)
    if not _load_key_store(ctx, props, listener):
        raise TlsConfigError(
            f"listener {listener} uses TLS but has no key store: set ssl.keystore.location "
            f"(or listener.name.{listener.lower()}.ssl.keystore.location) with "
            "ssl.keystore.type=PEM or PKCS12"
        )
    auth = client_auth(props, listener)
    has_trust = _load_trust_store(ctx, props, listener)
    if auth != "none":
        if not has_trust:
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        ctx.verify_mode = ssl.CERT_REQUIRED if auth == "required" else ssl.CERT_OPTIONAL
    return ctx


def client_context(props: Mapping[str, str], listener: str) -> ssl.SSLContext:
    """The context a broker uses to reach other brokers on `listener` (the inter-broker
    listener): its trust store, its key store when the peers ask for a client certificate,
    and host-name checks unless `ssl.endpoint.identification.algorithm` is empty."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _protocols(ctx, props, listener)
    if not _load_trust_store(ctx, props, listener):
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    _load_key_store(ctx, props, listener)
    algorithm = listener_value(props, listener, "ssl.endpoint.identification.algorithm")
    ctx.check_hostname = (algorithm if algorithm is not None else "https").strip() != ""
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx
