"""Small value types shared by every layer (no I/O, no imports from wherry)."""
