//! The SPANK plugin (being built).
