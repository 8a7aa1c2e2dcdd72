"""Certificates for security tests, made in the test with trustme (a real CA and real keys):
a CA, a broker certificate for 127.0.0.1/localhost, client certificates, written as PEM files
in Kafka's `ssl.keystore.type=PEM` layout (private key and certificate chain in one file)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme


@dataclass(frozen=True)
class ClientCert:
    cert: Path  # the certificate chain
    key: Path
    combined: Path  # key + chain, one file


@dataclass(frozen=True)
class TlsMaterial:
    ca: trustme.CA
    ca_pem: Path
    broker_keystore: Path  # key + chain (ssl.keystore.type=PEM)
    directory: Path

    def client(self, common_name: str) -> ClientCert:
        issued = self.ca.issue_cert(f"{common_name}.clients.test", common_name=common_name)
        cert = self.directory / f"{common_name}.crt"
        key = self.directory / f"{common_name}.key"
        combined = self.directory / f"{common_name}.pem"
        issued.cert_chain_pems[0].write_to_path(str(cert))
        for extra in issued.cert_chain_pems[1:]:
            extra.write_to_path(str(cert), append=True)
        issued.private_key_pem.write_to_path(str(key))
        issued.private_key_and_cert_chain_pem.write_to_path(str(combined))
        return ClientCert(cert, key, combined)

    def broker_overrides(self, client_auth: str = "none") -> list[str]:
        """`--override` values that give every TLS listener this material."""
        return [
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={self.broker_keystore}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={self.ca_pem}",
            f"ssl.client.auth={client_auth}",
        ]


def make_tls_material(directory: Path) -> TlsMaterial:
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(organization_name="wherry tests")
    ca_pem = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_pem))
    server = ca.issue_cert("127.0.0.1", "localhost", common_name="broker")
    keystore = directory / "broker.pem"
    server.private_key_and_cert_chain_pem.write_to_path(str(keystore))
    return TlsMaterial(ca, ca_pem, keystore, directory)
