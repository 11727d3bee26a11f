//! The VEE manager (VEEM) of one site: admits service manifests only when
//! it can keep their SLA, plans where and when each VEE runs, drives the
//! site's VEEHs over the VHI, checkpoints on the SLA's schedule, recovers
//! VEEs of failed hosts, federates with peer sites over the VMI and keeps
//! usage records (DESIGN.md §1, §4-7).
//!
//! Layers (ARCHITECTURE.md): the domain, the records and the ports at the
//! bottom (`domain`, `error`, `config`, `model`, `store`, `planner`,
//! `planner_store`, `peers`, `ports`, `hosts`, `ipam`, `wire`); the `core`
//! every workflow shares on them; the workflows as values (`workflows`);
//! the `Veem` facade that builds them (`manager`); the interfaces (`api`:
//! the VMI's gRPC server, REST, the front of its port, visibility, the
//! status map, the JSON shape), the `loops`, the `daemon` and the `cli` on
//! top; the simulation ports (`sim`, feature `sim`).

pub mod api;
// The interfaces under their earlier paths (`veem::server::VmiService`, ...).
pub use api::{front, rest, server, visibility};
pub mod cli;
pub mod config;
pub mod core;
pub mod daemon;
pub mod domain;
pub mod error;
pub mod failpoints;
pub mod hosts;
pub mod ipam;
pub mod leadership;
pub mod loops;
pub mod manager;
pub mod metrics;
pub mod model;
pub mod peers;
/// The planner (crate `vee-planner`).
pub use vee_planner as planner;
pub mod planner_store;
pub mod ports;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod steps;
pub mod store;
pub mod wire;
pub mod workflows;
