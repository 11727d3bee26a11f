//! What the end-to-end tests (`tests/`) and the benchmarks (`bench/`)
//! share: the two-site lab that `scripts/setup-host` starts ([`lab`]), the
//! tiny guest of `scripts/build-guest-image` and its serial counter
//! ([`guest`]), the workspace's daemons as child processes ([`daemon`]),
//! etcd clusters of Debian's etcd for the control plane's tests
//! ([`etcd`]), network partitions of nftables ([`partition`]), and
//! Debian's Prometheus scraping the daemons ([`prometheus`]). Nothing
//! here mocks libvirt.

pub mod daemon;
pub mod etcd;
pub mod guest;
pub mod lab;
pub mod partition;
pub mod pki;
pub mod prometheus;
pub mod registry;
