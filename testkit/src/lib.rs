//! What the end-to-end tests (`tests/`) and the benchmarks (`bench/`)
//! share: the two-site lab that `scripts/setup-host` starts ([`lab`]), the
//! tiny guest of `scripts/build-guest-image` and its serial counter
//! ([`guest`]), and the workspace's daemons as child processes
//! ([`daemon`]). Nothing here mocks libvirt.

pub mod daemon;
pub mod guest;
pub mod lab;
pub mod pki;
