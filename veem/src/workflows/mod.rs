//! The VEEM's workflows as values: each a struct holding the
//! [`Core`](crate::core::Core), the steps it composes (`crate::steps`) and
//! the workflows it calls, built once by the `Veem` facade in dependency
//! order. A workflow reaches the core's records, planner and ports through
//! `Deref`; it calls another workflow only through a field naming it, so
//! the call graph is the fields' graph, and it has no cycle; what several
//! workflows do (boot a VEE, stop it, act on it abroad, its networks and
//! checkpoints) is a step, not another workflow's method, so that the graph
//! stays at most four deep (the layering check prints it).
//!
//! Leaves: [`accounting`], [`resizing`], [`consoles`], [`peer_epochs`].
//! On steps and leaves: [`remapping`], [`federation`], [`migration`],
//! [`recovery`], [`lifecycle`], [`deploy`], [`scaling`], [`rollout`],
//! [`elasticity`], [`proposals`], [`peer_watch`], [`reconcile`].
//! ARCHITECTURE.md lists what each calls.

pub mod accounting;
pub mod consoles;
pub mod deploy;
pub mod elasticity;
pub mod federation;
pub mod lifecycle;
pub mod migration;
pub mod peer_epochs;
pub mod peer_watch;
pub mod proposals;
pub mod reconcile;
pub mod recovery;
pub mod remapping;
pub mod resizing;
pub mod rollout;
pub mod scaling;
