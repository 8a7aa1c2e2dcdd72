"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka implements them: the
credential a broker stores (Kafka's ScramFormatter / ScramCredentialUtils), the messages of
the exchange and the server side (Kafka's ScramSaslServer).

The broker stores no password, only `salt`, `stored_key = H(HMAC(SaltedPassword, "Client
Key"))`, `server_key = HMAC(SaltedPassword, "Server Key"))` and `iterations`, as the string
`salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>`.

An unknown user is not refused at the first message: the exchange goes on with a fake
credential derived from the user name (an HMAC under a per-process secret, so every attempt
with one name looks the same) and fails at the client's final message exactly as a wrong
password does, with the same message.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from wherry.security.sasl_mechanism import SaslAuthenticationError


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    """A SCRAM mechanism: its SASL name, hash, the code the SCRAM admin APIs use for it and
    Kafka's bounds on iterations."""

    mechanism_name: str
    hash_name: str
    type_code: int
    min_iterations: int = 4096
    max_iterations: int = 16384

    @property
    def digest_size(self) -> int:
        return hashlib.new(self.hash_name).digest_size

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512", 2)
MECHANISMS: dict[str, ScramMechanism] = {
    m.mechanism_name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)
}
DEFAULT_ITERATIONS = 4096


def mechanism_by_name(name: str) -> ScramMechanism | None:
    return MECHANISMS.get(name)


def mechanism_by_code(code: int) -> ScramMechanism | None:
    """The mechanism of an Alter/DescribeUserScramCredentials code (1, 2; 0 is UNKNOWN)."""
    for m in MECHANISMS.values():
        if m.type_code == code:
            return m
    return None


# --------------------------------------------------------------------------------------------
# Credentials (Kafka's ScramFormatter and ScramCredentialUtils)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int
                    ) -> bytes:
    """Hi(password, salt, i): PBKDF2 with the mechanism's HMAC (RFC 5802 §2.2). Kafka applies
    no SASLprep: the password's UTF-8 bytes."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode("utf-8"), salt, iterations)


def client_key(mechanism: ScramMechanism, salted: bytes) -> bytes:
    return mechanism.hmac(salted, b"Client Key")


def server_key(mechanism: ScramMechanism, salted: bytes) -> bytes:
    return mechanism.hmac(salted, b"Server Key")


def credential_from_salted(mechanism: ScramMechanism, salted: bytes, salt: bytes,
                           iterations: int) -> ScramCredential:
    """The stored credential from a salted password (what AlterUserScramCredentials sends)."""
    return ScramCredential(
        salt=salt,
        stored_key=mechanism.hash(client_key(mechanism, salted)),
        server_key=server_key(mechanism, salted),
        iterations=iterations,
    )


def new_salt() -> bytes:
    """A random salt; Kafka's is the bytes of a random base-36 string, any bytes serve."""
    return secrets.token_urlsafe(24).encode("ascii")


def generate_credential(mechanism: ScramMechanism, password: str, *,
                        iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
                        ) -> ScramCredential:
    salt = new_salt() if salt is None else salt
    return credential_from_salted(
        mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations
    )


def format_credential(cred: ScramCredential) -> str:
    """Kafka's credential string (ScramCredentialUtils.credentialToString)."""
    return (f"salt={_b64(cred.salt)},stored_key={_b64(cred.stored_key)},"
            f"server_key={_b64(cred.server_key)},iterations={cred.iterations}")


def parse_credential(text: str) -> ScramCredential:
    """Kafka's credential string back; ValueError when a field is missing or malformed."""
    fields: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"invalid SCRAM credential: {item!r} is not key=value")
        fields[key.strip()] = value.strip()
    try:
        return ScramCredential(
            salt=_unb64(fields["salt"]),
            stored_key=_unb64(fields["stored_key"]),
            server_key=_unb64(fields["server_key"]),
            iterations=int(fields["iterations"]),
        )
    except KeyError as e:
        raise ValueError(f"invalid SCRAM credential: no {e.args[0]}") from e
    except (binascii.Error, ValueError) as e:
        raise ValueError(f"invalid SCRAM credential: {e}") from e


# --------------------------------------------------------------------------------------------
# Messages (RFC 5802 §7)

_PRINTABLE_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")  # printable ASCII except ','
_CLIENT_FIRST = re.compile(r"n,(?:a=(?P<authzid>[^,]*))?,(?P<bare>.*)", re.DOTALL)
_CLIENT_FIRST_BARE = re.compile(
    r"n=(?P<saslname>[^,]*),r=(?P<nonce>[^,]*)(?P<extensions>(?:,[^,]*)*)", re.DOTALL
)
_CLIENT_FINAL = re.compile(
    r"(?P<without_proof>c=(?P<channel>[^,]*),r=(?P<nonce>[^,]*)(?:,[^,]*)*?),p=(?P<proof>[^,]*)",
    re.DOTALL,
)
_SERVER_FIRST = re.compile(
    r"r=(?P<nonce>[^,]*),s=(?P<salt>[^,]*),i=(?P<iterations>[0-9]+)(?:,[^,]*)*", re.DOTALL
)
SUPPORTED_EXTENSIONS = frozenset({"tokenauth"})


def escape_username(name: str) -> str:
    """saslname: `=` → `=3D`, `,` → `=2C` (RFC 5802 §5.1)."""
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_username(saslname: str) -> str:
    """The user name of a saslname; ValueError for an `=` not starting `=2C` or `=3D`."""
    out: list[str] = []
    i = 0
    while i < len(saslname):
        if saslname[i] == "=":
            code = saslname[i + 1 : i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise ValueError(f"Invalid username: {saslname}")
            i += 3
        else:
            out.append(saslname[i])
            i += 1
    return "".join(out)


def random_nonce() -> str:
    return secrets.token_urlsafe(24)


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def client_proof(mechanism: ScramMechanism, salted: bytes, auth_message: bytes) -> bytes:
    ck = client_key(mechanism, salted)
    return _xor(ck, mechanism.hmac(mechanism.hash(ck), auth_message))


def server_signature(mechanism: ScramMechanism, server_key_: bytes, auth_message: bytes
                     ) -> bytes:
    return mechanism.hmac(server_key_, auth_message)


# --------------------------------------------------------------------------------------------
# The server (Kafka's ScramSaslServer)

# Per process: a fake credential for an unknown user is the same on every attempt here, and
# unpredictable elsewhere.
_FAKE_SECRET = secrets.token_bytes(32)

CredentialLookup = Callable[[str], "ScramCredential | None"]


def fake_credential(mechanism: ScramMechanism, username: str) -> ScramCredential:
    """What an unknown user's exchange runs with: deterministic per (process, mechanism, user),
    matching no password anyone can know."""
    seed = hmac.new(_FAKE_SECRET, f"{mechanism.mechanism_name}\0{username}".encode(),
                    hashlib.sha256).digest()
    n = mechanism.digest_size
    return ScramCredential(
        salt=base64.b64encode(mechanism.hmac(seed, b"salt"))[:32],
        stored_key=mechanism.hmac(seed, b"stored_key")[:n],
        server_key=mechanism.hmac(seed, b"server_key")[:n],
        iterations=DEFAULT_ITERATIONS,
    )


def failure_message(mechanism: ScramMechanism) -> str:
    """Kafka's one message for every failed SCRAM exchange (it never tells why)."""
    return ("Authentication failed during authentication due to invalid credentials with SASL "
            f"mechanism {mechanism.mechanism_name}")


class ScramExchange:
    """One side of a SCRAM exchange: its mechanism and how far it went."""

    _mech: ScramMechanism
    _state: str

    @property
    def mechanism(self) -> str:
        return self._mech.mechanism_name

    @property
    def complete(self) -> bool:
        return self._state == "complete"


class ScramServer(ScramExchange):
    """One SCRAM exchange on the server: client-first → server-first, client-final →
    server-final (or failure). Any malformed or unexpected token fails it cleanly."""

    def __init__(self, mechanism: ScramMechanism, lookup: CredentialLookup, *,
                 nonce: Callable[[], str] = random_nonce) -> None:
        self._mech = mechanism
        self._lookup = lookup
        self._nonce = nonce
        self._state = "first"  # first → final → complete | failed
        self._username: str | None = None
        self._credential: ScramCredential | None = None
        self._fake = False
        self._gs2_header = b""
        self._client_first_bare = ""
        self._server_first = ""
        self._combined_nonce = ""

    @property
    def authorization_id(self) -> str | None:
        return self._username if self.complete else None

    def evaluate(self, token: bytes) -> bytes:
        state, self._state = self._state, "failed"  # until this step succeeds
        try:
            if state == "first":
                reply = self._client_first(token)
                self._state = "final"
            elif state == "final":
                reply = self._client_final(token)
                self._state = "complete"
            else:
                raise ValueError(f"Unexpected SCRAM token in state {state}")
        except SaslAuthenticationError:
            raise
        except Exception as e:  # any malformed token: one clean failure, never a crash
            raise SaslAuthenticationError(failure_message(self._mech)) from e
        return reply

    def _client_first(self, token: bytes) -> bytes:
        text = token.decode("utf-8")
        m = _CLIENT_FIRST.fullmatch(text)
        if m is None:
            raise ValueError("Invalid SCRAM client first message format")
        bare = _CLIENT_FIRST_BARE.fullmatch(m["bare"])
        if bare is None:
            raise ValueError("Invalid SCRAM client first message format")
        username = unescape_username(bare["saslname"])
        if not username:
            raise ValueError("Invalid SCRAM client first message: empty user name")
        client_nonce = bare["nonce"]
        if not _PRINTABLE_NONCE.fullmatch(client_nonce):
            raise ValueError("Invalid SCRAM client nonce")
        extensions = _parse_extensions(bare["extensions"])
        if not SUPPORTED_EXTENSIONS.issuperset(extensions):
            raise ValueError(f"Unsupported extensions will not be processed: {sorted(extensions)}")
        if extensions.get("tokenauth", "false").lower() == "true":
            raise ValueError("Delegation token authentication is not supported")
        authzid = m["authzid"]
        if authzid and unescape_username(authzid) != username:
            raise ValueError("Authentication failed: Client requested an authorization id that "
                             "is different from username")
        credential = self._lookup(username)
        if credential is None:
            credential, self._fake = fake_credential(self._mech, username), True
        if credential.iterations < self._mech.min_iterations:
            raise ValueError(f"Iterations {credential.iterations} is less than the minimum "
                             f"{self._mech.min_iterations} for {self._mech.mechanism_name}")
        self._username = username
        self._credential = credential
        self._gs2_header = text[: len(text) - len(m["bare"])].encode("utf-8")
        self._client_first_bare = m["bare"]
        self._combined_nonce = client_nonce + self._nonce()
        self._server_first = (f"r={self._combined_nonce},s={_b64(credential.salt)},"
                              f"i={credential.iterations}")
        return self._server_first.encode("utf-8")

    def _client_final(self, token: bytes) -> bytes:
        assert self._credential is not None
        text = token.decode("utf-8")
        m = _CLIENT_FINAL.fullmatch(text)
        if m is None:
            raise ValueError("Invalid SCRAM client final message format")
        proof = _unb64(m["proof"])
        channel = _unb64(m["channel"])
        auth_message = ",".join(
            (self._client_first_bare, self._server_first, m["without_proof"])
        ).encode("utf-8")
        cred = self._credential
        # The same work whatever is wrong, so a failure's timing does not say which.
        signature = self._mech.hmac(cred.stored_key, auth_message)
        if len(proof) != len(signature):
            proof = bytes(len(signature))
        computed = self._mech.hash(_xor(proof, signature))
        proof_ok = hmac.compare_digest(computed, cred.stored_key)
        nonce_ok = hmac.compare_digest(m["nonce"].encode("utf-8"),
                                       self._combined_nonce.encode("utf-8"))
        channel_ok = hmac.compare_digest(channel, self._gs2_header)
        if not (proof_ok and nonce_ok and channel_ok) or self._fake:
            raise SaslAuthenticationError(failure_message(self._mech))
        verifier = server_signature(self._mech, cred.server_key, auth_message)
        return f"v={_b64(verifier)}".encode()


def _parse_extensions(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in text.split(",")[1:]:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"Invalid SCRAM extension {item!r}")
        out[key] = value
    return out
