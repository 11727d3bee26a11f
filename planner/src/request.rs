//! What admission takes and answers: the service request (from a
//! manifest), placements, spare needs and the verdict (DESIGN.md §3
//! Negotiate: accept | counter-offer with the earliest feasible window |
//! reject with reasons).

use serde::{Deserialize, Serialize};
use vee_manifest::{Constraint, ConstraintLevel, GuaranteeLevel, Manifest, MigrationPolicy};

use super::capacity::{Profile, Resources};
use super::slots::{Slot, SlotClock, SlotRange};
use super::{ServiceId, VeeId};

/// One component of a [`ServiceRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComponentRequest {
    /// Component name (constraints refer to it).
    pub name: String,
    /// Resources of each VEE.
    pub resources: Resources,
    /// Compatibility profile the hosts must have (`None`: any).
    pub profile: Option<Profile>,
    /// One ID per instance.
    pub vees: Vec<VeeId>,
}

/// Whether a peer site offers a spare for a full-guarantee service.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerSpare {
    /// Not asked yet: admission answers [`Admission::NeedsPeerSpare`].
    #[default]
    NotAsked,
    /// The peer site `site` reserved the spares.
    Offered {
        /// The peer site.
        site: String,
    },
    /// No peer site offers one: a full-guarantee request is rejected.
    NoneOffered,
}

/// Slots a reservation holds beyond its service window for the VEEs'
/// timing overheads (H §3.4, the minimum slot of eq. 3.7,
/// t_initnew + t̂ + n·t_cp + t_deinit): `before` the window for their
/// initialization (t_initnew, eq. 3.1: image pull, domain definition,
/// boot; the VEEs are deployed that much ahead, so that they run when the
/// window opens), `after` it for a checkpoint in progress when the window
/// ends, which the stop waits for (t_cp, eq. 3.4), and for the stop itself
/// (t_deinit). The checkpoints inside the window (n·t_cp) pause the VEEs
/// within their wall-clock window and need no slot of their own; a restart
/// (t_initrestart, eq. 3.2) happens inside the reservation a recovery
/// makes from the failure on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Padding {
    /// Slots before the window.
    pub before: u32,
    /// Slots after the window.
    pub after: u32,
}

impl Padding {
    /// No padding (peer spares, incoming VEEs, tests).
    pub const NONE: Padding = Padding { before: 0, after: 0 };

    /// `window` padded, the part before it not earlier than slot `now`;
    /// returns the range and the padding as applied.
    pub fn apply(self, window: SlotRange, now: Slot) -> (SlotRange, Padding) {
        let start = window.start.saturating_sub(self.before).max(now.min(window.start));
        let applied = Padding {
            before: window.start - start,
            after: self.after,
        };
        (SlotRange::new(start, window.end.saturating_add(self.after)), applied)
    }

    /// The service window within `reserved`, a range padded by `self`.
    pub fn window_of(self, reserved: SlotRange) -> SlotRange {
        let start = reserved.start.saturating_add(self.before);
        SlotRange::new(start, reserved.end.saturating_sub(self.after).max(start))
    }
}

/// A service to admit: every VEE of every component over `window`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceRequest {
    /// Service ID (unique in the planner).
    pub service_id: ServiceId,
    /// The consumer (service provider) whose usage SLA applies (D §3.3).
    pub consumer: String,
    /// Guarantee level (H §3.2.2).
    pub guarantee: GuaranteeLevel,
    /// Migration policy (H §3.2.3), kept for recovery.
    pub migration: MigrationPolicy,
    /// Slots to reserve: the service window with its `padding`.
    pub window: SlotRange,
    /// The overheads `window` holds beyond the service window.
    #[serde(default)]
    pub padding: Padding,
    /// Components.
    pub components: Vec<ComponentRequest>,
    /// AA-constraints (E PIII).
    pub constraints: Vec<Constraint>,
    /// Peer-site spare for the full guarantee.
    pub peer_spare: PeerSpare,
}

impl ServiceRequest {
    /// The request for manifest `m`: its window in slots (clamped to start
    /// no earlier than `now_unix_s`), or `default_slots` from now when it
    /// has none. VEE IDs are `{service_id}-{component}-{instance}`.
    pub fn from_manifest(service_id: &str, m: &Manifest, clock: &SlotClock, now_unix_s: i64, default_slots: u32) -> ServiceRequest {
        let now = clock.slot_at(now_unix_s);
        let window = match &m.sla.window {
            Some(w) => clock.covering(w.start.timestamp(), w.end.timestamp()).from_slot(now),
            None => SlotRange::starting_at(now, default_slots),
        };
        let components = m
            .components
            .iter()
            .map(|c| ComponentRequest {
                name: c.name.clone(),
                resources: Resources::new(c.vcpus, c.memory_mib, c.disk_gib),
                profile: None,
                vees: (0..c.instances).map(|i| format!("{service_id}-{}-{i}", c.name)).collect(),
            })
            .collect();
        ServiceRequest {
            service_id: service_id.to_string(),
            consumer: m.service.provider.clone(),
            guarantee: m.sla.guarantee,
            migration: m.sla.migration,
            window,
            components,
            constraints: m.constraints.clone(),
            peer_spare: PeerSpare::NotAsked,
            padding: Padding::NONE,
        }
    }

    /// The request with its window padded by `padding` (not before slot
    /// `now`; see [`Padding::apply`]).
    pub fn padded(mut self, padding: Padding, now: Slot) -> ServiceRequest {
        (self.window, self.padding) = padding.apply(self.window, now);
        self
    }

    /// The service window of reserved range `reserved` (the request's
    /// window, or a counter-offer's).
    pub fn service_window(&self, reserved: SlotRange) -> SlotRange {
        self.padding.window_of(reserved)
    }

    /// Resources of all VEEs together (what the service holds per slot).
    pub fn total_resources(&self) -> Resources {
        self.components
            .iter()
            .fold(Resources::ZERO, |a, c| a + c.resources.times(c.vees.len() as u64))
    }

    /// Number of VEEs.
    pub fn vee_count(&self) -> usize {
        self.components.iter().map(|c| c.vees.len()).sum()
    }
}

/// Where a VEE (or a spare) is placed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The VEE (for a spare: the VEE it protects).
    pub vee: VeeId,
    /// Its component.
    pub component: String,
    /// Host name.
    pub host: String,
    /// Slots.
    pub range: SlotRange,
    /// Resources per slot.
    pub resources: Resources,
}

/// A spare a peer site must hold for a full-guarantee VEE.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpareNeed {
    /// The VEE it protects.
    pub vee: VeeId,
    /// Its component.
    pub component: String,
    /// Resources per slot.
    pub resources: Resources,
    /// Slots.
    pub range: SlotRange,
    /// Compatibility profile, if the VEE requires one.
    pub profile: Option<Profile>,
    /// The peer site holding it, once offered.
    pub site: Option<String>,
}

/// VEEs a site- or region-level anti-affinity sends to peer sites.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteNeed {
    /// Index of the constraint in the request.
    pub constraint: usize,
    /// Its level.
    pub level: ConstraintLevel,
    /// What is missing locally.
    pub reason: String,
    /// The VEEs that cannot be placed locally.
    pub vees: Vec<VeeId>,
}

/// An accepted service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Admitted {
    /// Service ID.
    pub service: ServiceId,
    /// Reserved window.
    pub window: SlotRange,
    /// One per VEE.
    pub placements: Vec<Placement>,
    /// Local spares (enhanced), one per VEE.
    pub spares: Vec<Placement>,
    /// Peer-site spares (full), one per VEE.
    pub peer_spares: Vec<SpareNeed>,
    /// Background VEEs displaced to make room: suspend them.
    pub preempted: Vec<VeeId>,
}

/// The planner's answer to a [`ServiceRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Admission {
    /// Every VEE is placed (by [`Planner::admit`](super::Planner::admit): reserved).
    Accepted(Admitted),
    /// Full guarantee: feasible locally; ask peer sites for these spares,
    /// then submit again with [`PeerSpare::Offered`] (or `NoneOffered`).
    NeedsPeerSpare {
        /// One per VEE.
        spares: Vec<SpareNeed>,
    },
    /// Infeasible as asked; feasible over `window` (same length, later).
    CounterOffer {
        /// The earliest feasible window.
        window: SlotRange,
        /// Why the requested window is infeasible.
        reasons: Vec<String>,
    },
    /// Infeasible; `remote` lists VEEs that would have to go to peer sites.
    Rejected {
        /// Why.
        reasons: Vec<String>,
        /// VEEs that site- or region-level anti-affinity sends elsewhere.
        remote: Vec<RemoteNeed>,
    },
}

impl Admission {
    /// Whether the request was accepted.
    pub fn is_accepted(&self) -> bool {
        matches!(self, Admission::Accepted(_))
    }

    /// The reasons of a counter-offer or rejection (empty otherwise).
    pub fn reasons(&self) -> &[String] {
        match self {
            Admission::CounterOffer { reasons, .. } | Admission::Rejected { reasons, .. } => reasons,
            _ => &[],
        }
    }
}
