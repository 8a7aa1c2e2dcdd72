"""Dynamic password configs as Kafka stores them: encrypted under `password.encoder.secret`,
in its `name:value,...` form, decoded only with the same secret."""

from __future__ import annotations

import pytest

from wherry.security.password_encoder import PasswordDecodeError, decode, encode


def test_round_trip_in_kafkas_form() -> None:
    stored = encode("the-secret", "keystore-pässword")
    fields = dict(item.split(":", 1) for item in stored.split(","))
    assert fields["keyFactoryAlgorithm"] == "PBKDF2WithHmacSHA512"
    assert fields["cipherAlgorithm"] == "AES/CBC/PKCS5Padding"
    assert (fields["keyLength"], fields["iterations"]) == ("128", "4096")
    assert fields["passwordLength"] == str(len("keystore-pässword"))
    assert "keystore" not in stored
    assert decode("the-secret", stored) == "keystore-pässword"
    assert encode("the-secret", "x") != encode("the-secret", "x")  # a fresh salt and IV


def test_another_secret_cannot_decode() -> None:
    stored = encode("the-secret", "keystore-password")
    with pytest.raises(PasswordDecodeError):
        decode("another-secret", stored)
    with pytest.raises(PasswordDecodeError):
        decode("the-secret", "not an encoded password")
