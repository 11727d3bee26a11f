//! Affinity and anti-affinity (AA-constraints, E PIII §II-III) as a host
//! filter.
//!
//! A constraint relates the instances of its components at a level (host,
//! site, region): anti-affinity puts them on different hosts / sites /
//! regions, affinity on the same. Scope (E PIII §III):
//! - instance scope relates every pair of instances, same type included
//!   ("every instance on a different host");
//! - type scope relates instances of different types only ("db and web never
//!   share a host", two db instances may).
//!
//! Type-scope affinity over two or more types is treated like instance
//! scope: if every `a` must share a host with every `b` and vice versa, all
//! of them end up together anyway, and placing them so from the start avoids
//! dead ends.
//!
//! Hosts carry site and region labels, so site- and region-level
//! constraints are planned like host-level ones when the planner's hosts
//! span several labels. When they cannot be met locally (a site-level
//! anti-affinity over more VEEs than there are local sites), the planner
//! reports a [`RemoteNeed`]: the VEEs that must be placed at peer sites.

use std::collections::HashSet;

use vee_manifest::{Constraint, ConstraintKind, ConstraintLevel, ConstraintScope};

use super::capacity::HostIdx;
use super::request::{RemoteNeed, ServiceRequest};
use super::Planner;

/// The constraints that apply to one VEE, given where the other VEEs of its
/// service are: labels it must avoid and labels it must share.
#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    apart: Vec<(ConstraintLevel, HashSet<u32>)>,
    together: Vec<(ConstraintLevel, u32)>,
    impossible: bool,
}

impl Filter {
    /// No constraint.
    pub(crate) fn none() -> Filter {
        Filter::default()
    }

    /// Builds the filter for a VEE of `component`, given the `others`
    /// already placed as (component, host).
    pub(crate) fn build(planner: &Planner, constraints: &[Constraint], component: &str, others: &[(&str, HostIdx)]) -> Filter {
        let mut f = Filter::none();
        for c in constraints.iter().filter(|c| c.components.iter().any(|n| n == component)) {
            let related = others.iter().filter(|(oc, _)| c.components.iter().any(|n| n == oc));
            match c.kind {
                ConstraintKind::AntiAffinity => {
                    let labels: HashSet<u32> = related
                        .filter(|(oc, _)| c.scope == ConstraintScope::Instance || *oc != component)
                        .map(|(_, h)| planner.label(*h, c.level))
                        .collect();
                    if !labels.is_empty() {
                        f.apart.push((c.level, labels));
                    }
                }
                ConstraintKind::Affinity => {
                    let mut labels = related.map(|(_, h)| planner.label(*h, c.level));
                    if let Some(first) = labels.next() {
                        if labels.any(|l| l != first) {
                            f.impossible = true;
                        }
                        if f.together.iter().any(|(lv, l)| *lv == c.level && *l != first) {
                            f.impossible = true;
                        }
                        f.together.push((c.level, first));
                    }
                }
            }
        }
        f
    }

    /// Whether no host can satisfy the filter (contradictory placements).
    pub(crate) fn impossible(&self) -> bool {
        self.impossible
    }

    /// Whether host `h` satisfies every rule.
    pub(crate) fn allows(&self, planner: &Planner, h: HostIdx) -> bool {
        !self.impossible
            && self.apart.iter().all(|(lv, labels)| !labels.contains(&planner.label(h, *lv)))
            && self.together.iter().all(|(lv, l)| planner.label(h, *lv) == *l)
    }

    /// The host a host-level affinity pins the VEE to.
    pub(crate) fn pinned_host(&self) -> Option<HostIdx> {
        self.together.iter().find(|(lv, _)| *lv == ConstraintLevel::Host).map(|(_, h)| *h)
    }
}

/// How many distinct labels an anti-affinity constraint needs: one per
/// instance (instance scope) or one per component (type scope).
fn labels_needed(req: &ServiceRequest, c: &Constraint) -> usize {
    let comps = req.components.iter().filter(|x| c.components.contains(&x.name));
    match c.scope {
        ConstraintScope::Instance => comps.map(|x| x.vees.len()).sum(),
        ConstraintScope::Type => comps.filter(|x| !x.vees.is_empty()).count(),
    }
}

impl Planner {
    /// Number of distinct labels at `level` among usable hosts that could
    /// hold at least one VEE of the components named in `c`.
    fn distinct_labels(&self, req: &ServiceRequest, c: &Constraint, level: ConstraintLevel) -> usize {
        let comps: Vec<_> = req.components.iter().filter(|x| c.components.contains(&x.name)).collect();
        let mut labels = HashSet::new();
        for (i, rec) in self.p.hosts.iter().enumerate() {
            if !rec.usable_for(req.window.start) {
                continue;
            }
            let fits = comps.iter().any(|x| {
                x.resources.fits_in(&rec.spec.capacity)
                    && x.profile
                        .as_ref()
                        .filter(|p| self.d.profile_ids.get(*p) != Some(&rec.profile))
                        .is_none()
            });
            if fits {
                labels.insert(self.label(i as HostIdx, level));
            }
        }
        labels.len()
    }

    /// Anti-affinity constraints that need more hosts / sites / regions than
    /// the planner has. Host level: a local impossibility (reason only).
    /// Site and region level: the VEEs that must go to peer sites.
    pub(crate) fn constraint_shortfalls(&self, req: &ServiceRequest) -> (Vec<String>, Vec<RemoteNeed>) {
        let mut reasons = Vec::new();
        let mut remote = Vec::new();
        for (i, c) in req.constraints.iter().enumerate() {
            if c.kind != ConstraintKind::AntiAffinity {
                continue;
            }
            let needed = labels_needed(req, c);
            let have = self.distinct_labels(req, c, c.level);
            if needed <= have {
                continue;
            }
            let what = match c.level {
                ConstraintLevel::Host => "hosts",
                ConstraintLevel::Site => "sites",
                ConstraintLevel::Region => "regions",
            };
            let reason = format!(
                "constraint[{i}] (anti-affinity, {:?} level, {:?} scope, components {:?}) needs {needed} distinct {what}, \
                 only {have} can hold them here",
                c.level, c.scope, c.components
            );
            if c.level == ConstraintLevel::Host {
                reasons.push(reason);
                continue;
            }
            // The VEEs beyond the local labels must run elsewhere.
            let mut vees: Vec<String> = match c.scope {
                ConstraintScope::Instance => req
                    .components
                    .iter()
                    .filter(|x| c.components.contains(&x.name))
                    .flat_map(|x| x.vees.iter().cloned())
                    .collect(),
                ConstraintScope::Type => req
                    .components
                    .iter()
                    .filter(|x| c.components.contains(&x.name))
                    .skip(have)
                    .flat_map(|x| x.vees.iter().cloned())
                    .collect(),
            };
            if c.scope == ConstraintScope::Instance {
                vees = vees.split_off(have.min(vees.len()));
            }
            reasons.push(format!("{reason}: needs remote placement"));
            remote.push(RemoteNeed {
                constraint: i,
                level: c.level,
                reason: format!("{} more {what}", needed - have),
                vees,
            });
        }
        (reasons, remote)
    }
}
