//! Precondition bitmask gating and allow / deny scopes.
