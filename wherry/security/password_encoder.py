"""Kafka's encoding of password configs stored in ZooKeeper (its EncryptingPasswordEncoder):
AES/CBC/PKCS5Padding under a key derived from the broker's `password.encoder.secret` with
PBKDF2WithHmacSHA512 (a random 256-byte salt, 4096 iterations, 128-bit key), written as
Kafka writes it: `name:value` pairs joined by commas, binary values in base64."""

from __future__ import annotations

import base64
import hashlib
import os

__all__ = ["PasswordDecodeError", "decode", "encode"]

_KEY_FACTORY = "PBKDF2WithHmacSHA512"
_CIPHER = "AES/CBC/PKCS5Padding"


class PasswordDecodeError(ValueError):
    """A stored password that this secret cannot decode."""


def _key(secret: str, salt: bytes, iterations: int, key_length: int) -> bytes:
    return hashlib.pbkdf2_hmac("sha512", secret.encode(), salt, iterations, key_length // 8)


def encode(secret: str, password: str, *, key_length: int = 128, iterations: int = 4096) -> str:
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    salt, iv = os.urandom(256), os.urandom(16)
    padder = padding.PKCS7(128).padder()
    data = padder.update(password.encode()) + padder.finalize()
    enc = Cipher(algorithms.AES(_key(secret, salt, iterations, key_length)), modes.CBC(iv))
    encryptor = enc.encryptor()
    encrypted = encryptor.update(data) + encryptor.finalize()
    fields = {
        "keyFactoryAlgorithm": _KEY_FACTORY,
        "cipherAlgorithm": _CIPHER,
        "keyLength": str(key_length),
        "salt": base64.b64encode(salt).decode(),
        "iterations": str(iterations),
        "encryptedPassword": base64.b64encode(encrypted).decode(),
        "passwordLength": str(len(password)),
        "initializationVector": base64.b64encode(iv).decode(),
    }
    return ",".join(f"{k}:{v}" for k, v in fields.items())


def decode(secret: str, encoded: str) -> str:
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    try:
        params = dict(item.split(":", 1) for item in encoded.split(","))
        if params["cipherAlgorithm"] != _CIPHER or params["keyFactoryAlgorithm"] != _KEY_FACTORY:
            raise PasswordDecodeError("Password could not be decoded: unsupported algorithm")
        key = _key(
            secret,
            base64.b64decode(params["salt"]),
            int(params["iterations"]),
            int(params["keyLength"]),
        )
        iv = base64.b64decode(params["initializationVector"])
        dec = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
        data = dec.update(base64.b64decode(params["encryptedPassword"])) + dec.finalize()
        unpadder = padding.PKCS7(128).unpadder()
        password = (unpadder.update(data) + unpadder.finalize()).decode()
    except (KeyError, ValueError) as e:
        raise PasswordDecodeError("Password could not be decoded") from e
    if len(password) != int(params["passwordLength"]):
        raise PasswordDecodeError("Password could not be decoded, sanity check of length failed")
    return password
