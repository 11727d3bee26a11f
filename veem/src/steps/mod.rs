//! The steps several workflows share, as values: each a struct holding the
//! [`Core`](crate::core::Core) and the steps it builds on, built once by
//! the `Veem` facade before the workflows. A step calls the core, its
//! ports and other steps, never a workflow (the layer table of
//! ARCHITECTURE.md puts steps below the workflows; the layering check
//! fails an import upwards), so a workflow composes steps without going
//! through another workflow.
//!
//! [`boot`] (a VEE booted on a host, or shut down), [`stop`] (a VEE
//! stopped for good, here or abroad), [`abroad`] (an action forwarded to
//! the peer site running a VEE), [`networks`] (a
//! service's networks: member tables, specs, stretching), [`checkpoints`]
//! (checkpoint records and their replication), [`background`]
//! (displacement), [`intents`] (intent records of steps outside the
//! database), [`site_constraints`], [`sla`], [`spares`], [`windows`].

pub mod abroad;
pub mod background;
pub mod boot;
pub mod checkpoints;
pub mod intents;
pub mod networks;
pub mod site_constraints;
pub mod sla;
pub mod spares;
pub mod stop;
pub mod windows;
