"""wherry."""
