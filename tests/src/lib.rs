//! Helpers for the end-to-end tests: the lab, the guest image, daemons.
