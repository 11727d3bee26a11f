//! The VEE host (VEEH): runs and meters VEEs on one host and translates VHI
//! calls into libvirt calls (E PII §II-A). Only this crate speaks libvirt.
//!
//! Modules: `config` (the TOML file), `accel` (KVM or TCG), `domain_xml`
//! (generation and rewriting), `hypervisor` (the libvirt connection),
//! `image_cache`, `vee_store` (per-VEE directories), `qemu_img`, `host` (the
//! VHI operations), `checkpoint`, `migration`, `error` (typed errors and their status
//! codes), `server` (gRPC).

pub mod accel;
pub mod checkpoint;
pub mod chunks;
pub mod config;
pub mod console;
pub mod domain_xml;
pub mod error;
pub mod failpoints;
pub mod host;
pub mod hypervisor;
pub mod image_cache;
pub mod kpi;
pub mod metrics;
pub mod migration;
pub mod network;
pub mod qemu_img;
pub mod repository;
pub mod seed;
pub mod server;
pub mod vee_store;
