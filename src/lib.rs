//! Host package of the repository-level `examples/` and `tests/`; it has no API of its own.
