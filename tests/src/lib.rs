//! Helpers for the end-to-end tests: the two-site lab that
//! `scripts/setup-host` starts, the tiny guest of `scripts/build-guest-image`,
//! and real daemons (`image-repo`, `veeh`, `veem`) started as processes.
//! Nothing here mocks libvirt.

pub mod abusive;
pub mod browser;
pub mod chaos;
pub mod console;
pub mod daemons;
pub mod disk;
pub mod grpc;
pub mod guides;
pub mod ha;
pub mod net;
pub mod site;
pub mod two_sites;

pub use vee_testkit::{guest, lab};
