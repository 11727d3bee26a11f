//! Elasticity rules applied by the VEEM (issue 40, item 2; E §4.1, §4.4):
//! every `elasticity_interval` on the core's clock, each component with
//! `[[elasticity]]` rules of each service this site is primary for (and
//! that has a live instance: an undeployed service is left alone) is
//! decided on by the rule engine ([`crate::domain::elasticity`]) from its
//! live instances' metrics as metered here (samples newer than three
//! metering rounds), and scaled as `veem scale` scales it. Each decision
//! is an event of the service (`elasticity`: the rule, the values, the
//! count from and to); a scale-out the planner refuses is one too
//! (`elasticity-refused`, with the planner's reasons), and the rule waits
//! out its cooldown before it asks again.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::{Arc, Mutex};

use interfaces::manifest::elasticity::{rules, Resource, Rule};

use crate::core::Core;
use crate::domain::elasticity::{changed, decide, decide_resize, RuleState};
use crate::model::{ServiceRec, VeeState};
use crate::store::Tree;
use crate::workflows::accounting::Accounting;
use crate::workflows::resizing::Resizing;
use crate::workflows::scaling::Scaling;

/// See the module documentation. Calls the core, accounting (the
/// metrics) and scaling.
pub struct Elasticity {
    pub(crate) core: Arc<Core>,
    pub(crate) accounting: Arc<Accounting>,
    pub(crate) scaling: Arc<Scaling>,
    pub(crate) resizing: Arc<Resizing>,
    /// What each rule remembers, by (service, component).
    pub(crate) states: Mutex<HashMap<(String, String), HashMap<usize, RuleState>>>,
}

impl Deref for Elasticity {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Elasticity {
    /// One round over every service with rules (see the module
    /// documentation).
    pub async fn round(&self) {
        let services = match self.with_rules() {
            Ok(these) => these,
            Err(e) => return tracing::warn!(error = %format!("{e:#}"), "elasticity: cannot list the services"),
        };
        for svc in services {
            let Some(terms) = &svc.terms else { continue };
            if terms.elasticity.is_empty() || svc.for_peer.is_some() {
                continue;
            }
            let all = rules(&terms.elasticity);
            let mut components: Vec<&str> = all.iter().map(Rule::component).collect();
            components.sort();
            components.dedup();
            for component in components {
                let mine: Vec<(usize, &Rule)> = all.iter().enumerate().filter(|(_, r)| r.component() == component).collect();
                self.component_round(&svc, component, &mine).await;
            }
        }
    }

    /// The services of this site's own with elasticity rules, as the
    /// store's index of them lists them (`Tree::ElasticServices`, kept
    /// in the commit that writes a service): a round reads those records,
    /// not every service's.
    fn with_rules(&self) -> anyhow::Result<Vec<ServiceRec>> {
        let mut ids = Vec::new();
        self.store.scan(Tree::ElasticServices, |key, _| {
            ids.push(key.to_string());
            Ok(())
        })?;
        let mut these = Vec::with_capacity(ids.len());
        for id in ids {
            these.extend(self.store.get::<ServiceRec>(Tree::Services, &id)?);
        }
        Ok(these)
    }

    async fn component_round(&self, svc: &ServiceRec, component: &str, rules: &[(usize, &Rule)]) {
        let live: Vec<String> = self
            .vees_where(|v| {
                v.service_id == svc.id
                    && v.component == component
                    && !matches!(v.state, VeeState::Pending | VeeState::Rejected | VeeState::Terminated)
            })
            .into_iter()
            .map(|v| v.id)
            .collect();
        if live.is_empty()
            && self
                .vees_where(|v| v.service_id == svc.id && v.state != VeeState::Terminated)
                .is_empty()
        {
            return;
        }
        let now = self.clock.now_ms();
        let fresh_since = now - 3 * self.cfg.usage_interval.as_millis() as i64;
        let key = (svc.id.clone(), component.to_string());
        let decision = {
            let mut all = self.states.lock().unwrap();
            let states = all.entry(key.clone()).or_default();
            let at = chrono::DateTime::from_timestamp_millis(now).unwrap_or_default();
            let metric = |name: &str| self.accounting.samples.average(live.iter().map(String::as_str), name, fresh_since);
            decide(rules, states, live.len() as u32, metric, at)
        };
        self.resize_round(svc, component, rules, &live, fresh_since).await;
        let Some(d) = decision else { return };
        let what = format!("rule elasticity[{}]: {component} {} -> {}: {}", d.rule, d.from, d.to, d.why);
        tracing::info!(service = %svc.id, "{what}");
        self.event("", &svc.id, "elasticity", what);
        if let Err(e) = self.scaling.scale(&svc.id, component, d.to).await {
            let why = format!("rule elasticity[{}]: {component} {} -> {} refused: {e:#}", d.rule, d.from, d.to);
            tracing::warn!(service = %svc.id, "{why}");
            self.event("", &svc.id, "elasticity-refused", why);
        }
        changed(self.states.lock().unwrap().entry(key).or_default(), d.rule, self.clock.now_ms());
    }

    /// The resize rules of `component` of `svc` (vertical elasticity):
    /// when one decides, each running instance of `live` gets one step
    /// more or less (within the rule's bounds) as `veem resize` gives it,
    /// an event says so (`elasticity`), and one per instance the planner
    /// or its host refused (`elasticity-refused`).
    async fn resize_round(&self, svc: &ServiceRec, component: &str, rules: &[(usize, &Rule)], live: &[String], fresh_since: i64) {
        if !rules.iter().any(|(_, r)| matches!(r, Rule::Resize { .. })) {
            return;
        }
        let key = (svc.id.clone(), component.to_string());
        let now = self.clock.now_ms();
        let decision = {
            let mut all = self.states.lock().unwrap();
            let at = chrono::DateTime::from_timestamp_millis(now).unwrap_or_default();
            let metric = |name: &str| self.accounting.samples.average(live.iter().map(String::as_str), name, fresh_since);
            decide_resize(rules, all.entry(key.clone()).or_default(), metric, at)
        };
        let Some(d) = decision else { return };
        let mut vees = self.vees_where(|v| live.contains(&v.id) && v.state == VeeState::Running);
        vees.sort_by_key(|v| v.instance);
        let unit = d.resource.unit();
        let (mut resized, mut refused) = (Vec::new(), Vec::new());
        for v in vees {
            let (vcpus, memory_mib, from) = match d.resource {
                Resource::Memory => (None, Some(d.size_for(v.memory_mib)), v.memory_mib),
                Resource::Vcpus => (Some(d.size_for(v.vcpus.into()) as u32), None, u64::from(v.vcpus)),
            };
            let to = vcpus.map_or(memory_mib.unwrap_or(from), u64::from);
            if to == from {
                continue;
            }
            match self.resizing.resize(&v.id, vcpus, memory_mib).await {
                Ok(_) => resized.push(format!("instance {} {from} -> {to}{unit}", v.instance)),
                Err(e) => refused.push(format!("instance {} {from} -> {to}{unit} refused: {e:#}", v.instance)),
            }
        }
        if resized.is_empty() && refused.is_empty() {
            return;
        }
        if !resized.is_empty() {
            let what = format!(
                "rule elasticity[{}]: {component} resized: {}: {}",
                d.rule,
                resized.join(", "),
                d.why
            );
            tracing::info!(service = %svc.id, "{what}");
            self.event("", &svc.id, "elasticity", what);
        }
        for r in refused {
            let why = format!("rule elasticity[{}]: {component} {r}", d.rule);
            tracing::warn!(service = %svc.id, "{why}");
            self.event("", &svc.id, "elasticity-refused", why);
        }
        changed(self.states.lock().unwrap().entry(key).or_default(), d.rule, self.clock.now_ms());
    }
}

#[cfg(test)]
mod tests;
