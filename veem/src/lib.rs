//! The VEE manager (VEEM) of one site: admits service manifests only when
//! it can keep their SLA, plans where and when each VEE runs, drives the
//! site's VEEHs over the VHI, checkpoints on the SLA's schedule, recovers
//! VEEs of failed hosts, federates with peer sites over the VMI and keeps
//! usage records (DESIGN.md §1, §4-7).
//!
//! Modules: `config`, `model` (records), `store` (sled), `planner_store`
//! (the planner in the store, written incrementally), `core` (the
//! shared state every workflow uses), `manager` (`Veem`: the core and the
//! workflows' own state), `hosts` (VHI clients, heartbeats), `planner` (pure planning
//! logic), `deploy` (negotiation, admission), `lifecycle` (actions,
//! checkpoint schedule), `recovery`, `migration`, `proposals` (migrations the
//! planner proposes by itself), `federation`, `peers`,
//! `accounting`, `reconcile`, `server` (VMI), `wire` (domain enums on the VMI),
//! `daemon`, `cli`.

pub mod api;
pub mod cli;
pub mod config;
pub mod core;
pub mod daemon;
pub mod domain;
pub mod error;
pub mod failpoints;
pub mod front;
pub mod hosts;
pub mod ipam;
pub mod loops;
pub mod manager;
pub mod model;
pub mod peers;
/// The planner (crate `vee-planner`).
pub use vee_planner as planner;
pub mod planner_store;
pub mod ports;
pub mod rest;
pub mod server;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod store;
pub mod visibility;
pub mod wire;
pub mod workflows;
