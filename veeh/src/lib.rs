//! VEE host.
