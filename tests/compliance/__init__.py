"""The backend compliance suite (see README.md)."""
