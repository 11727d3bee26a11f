//! The VEEM's workflows as values (issue 37): each a struct holding the
//! [`Core`](crate::core::Core) and the workflows below it that it calls,
//! built once by the `Veem` facade in dependency order. A workflow reaches
//! the core's records, planner and ports through `Deref`; it calls another
//! workflow only through a field naming it, so the call graph is the
//! fields' graph, and it has no cycle.
//!
//! Leaves (the core, and at most another leaf): [`boot`] (a VEE booted
//! on a host), [`checkpoints`] (checkpoint records), [`background`]
//! (displacement), [`intents`], [`networks`], [`site_constraints`],
//! [`sla`], [`spares`], [`windows`], [`accounting`], [`resizing`]. On them:
//! [`remapping`], [`federation`], [`migration`], [`recovery`],
//! [`lifecycle`], [`deploy`], [`scaling`], [`rollout`], [`elasticity`], [`proposals`], [`peer_watch`],
//! [`reconcile`]. ARCHITECTURE.md lists what each calls.

pub mod accounting;
pub mod background;
pub mod boot;
pub mod checkpoints;
pub mod consoles;
pub mod deploy;
pub mod elasticity;
pub mod federation;
pub mod intents;
pub mod lifecycle;
pub mod migration;
pub mod networks;
pub mod peer_epochs;
pub mod peer_watch;
pub mod proposals;
pub mod reconcile;
pub mod recovery;
pub mod remapping;
pub mod resizing;
pub mod rollout;
pub mod scaling;
pub mod site_constraints;
pub mod sla;
pub mod spares;
pub mod windows;
