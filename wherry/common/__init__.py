"""What every layer shares: small value types and plumbing (no I/O, no imports from wherry)."""
