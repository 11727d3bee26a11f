//! A service's site- and region-level constraints across sites (E PIII
//! §II: affinity and anti-affinity at host, site and region level). The
//! planner keeps them among this site's hosts; here they decide which peer
//! site a VEE may go to — when it is placed remotely at admission, restored
//! at a peer, or moved there — given where the service's other VEEs are:
//! anti-affinity never puts two covered VEEs at one site (or in one
//! region), affinity keeps them at one site (or region). A site's region is
//! its `[[peers]] region` (default: its site ID); this site's VEEs are in
//! their host's region (`[[hosts]] region`, default: this site's ID).

use std::ops::Deref;
use std::sync::Arc;

use interfaces::manifest::{Constraint, ConstraintKind, ConstraintLevel, ConstraintScope};

use crate::core::Core;
use crate::model::{Location, VeeRec};

/// Which peer site a VEE may go to under its service's site- and region-level constraints (see the module doc): a leaf the placing, restoring and moving workflows share. Calls only the core.
pub struct SiteConstraints {
    core: Arc<Core>,
}

impl Deref for SiteConstraints {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl SiteConstraints {
    pub fn new(core: Arc<Core>) -> Self {
        Self { core }
    }
}

impl SiteConstraints {
    /// The region of peer site `site` (its ID when it has no label).
    pub fn peer_region(&self, site: &str) -> String {
        self.cfg
            .peers
            .iter()
            .find(|p| p.site_id == site)
            .and_then(|p| p.region.clone())
            .unwrap_or_else(|| site.to_string())
    }

    /// Where `v` is, as (site, region); `None` when it is placed nowhere.
    fn site_and_region(&self, v: &VeeRec) -> Option<(String, String)> {
        match &v.location {
            Location::Host(h) => Some((
                self.cfg.site_id.clone(),
                self.hosts.region(h).unwrap_or_else(|| self.cfg.site_id.clone()),
            )),
            Location::Site(s) => Some((s.clone(), self.peer_region(s))),
            Location::Nowhere => None,
        }
    }

    /// The constraints of `v`'s service (none when its manifest cannot be
    /// read: a VEE run for a peer has none here).
    pub(crate) fn constraints_of(&self, v: &VeeRec) -> Vec<Constraint> {
        self.terms_of(&v.service_id).map(|t| t.constraints).unwrap_or_default()
    }

    /// Why VEE `v` may not go to peer site `site` under `constraints`
    /// given where `others` (its service's other VEEs; `v` itself and those
    /// placed nowhere are skipped) are; `None` when it may.
    pub(crate) fn site_refusal(&self, v: &VeeRec, site: &str, others: &[VeeRec], constraints: &[Constraint]) -> Option<String> {
        let region = self.peer_region(site);
        for c in constraints {
            if c.level == ConstraintLevel::Host || !c.components.contains(&v.component) {
                continue;
            }
            for o in others.iter().filter(|o| o.id != v.id) {
                let covered = c.components.contains(&o.component) && (c.scope == ConstraintScope::Instance || o.component != v.component);
                let Some((o_site, o_region)) = covered.then(|| self.site_and_region(o)).flatten() else {
                    continue;
                };
                let (together, what, theirs) = match c.level {
                    ConstraintLevel::Site => (o_site == site, "site", o_site),
                    _ => (o_region == region, "region", o_region),
                };
                let broken = match c.kind {
                    ConstraintKind::AntiAffinity => together,
                    ConstraintKind::Affinity => !together,
                };
                if broken {
                    let (kind, rule) = match c.kind {
                        ConstraintKind::AntiAffinity => ("anti-affinity", "apart from"),
                        ConstraintKind::Affinity => ("affinity", "together with"),
                    };
                    return Some(format!(
                        "{what}-level {kind} keeps {}-{} {rule} {}-{} (at {what} {theirs})",
                        v.component, v.instance, o.component, o.instance
                    ));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests;
