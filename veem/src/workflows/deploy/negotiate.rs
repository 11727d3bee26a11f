//! What Negotiate and Deploy do before anything is reserved: the manifest
//! checked for its caller (the provider its token speaks for, images it may
//! read), the planner request made of it, and the planner's answer as the
//! VMI's reply (accept, counter-offer with the earliest window, reject with
//! reasons).

use interfaces::manifest::{Component, ImageRef, Manifest};
use interfaces::BlobId;

use super::Deploy;
use super::Refusal;
use crate::config::Role;
use crate::domain::{Offer, Verdict};
use crate::planner::{Admission, ServiceRequest};

impl Deploy {
    /// Parses, validates and checks a manifest for `caller`: the provider
    /// must be the caller's own, and every image ID one the provider may
    /// read in the image repository (its own, shared with it or public:
    /// never another provider's image or a checkpoint; issue 13 S3). A
    /// registry image must be in a registry the site trusts, within the
    /// registry's scope for the provider, and a VEE image artifact there;
    /// the manifest returned names it by its digest (a tag resolved once,
    /// here: the digest is what the VEEs keep).
    pub async fn check_manifest(&self, caller: &Role, toml: &str) -> Result<Manifest, Refusal> {
        let mut m = Manifest::from_toml(toml).map_err(|e| Refusal(vec![e.to_string()]))?;
        if let Role::Provider(p) = caller {
            if &m.service.provider != p {
                return Err(Refusal(vec![format!(
                    "manifest field `service.provider`: {:?} is not the provider this token speaks for ({p:?})",
                    m.service.provider
                )]));
            }
        }
        let mut missing = Vec::new();
        for (i, c) in m.components.iter().enumerate() {
            let ids: [(&str, Option<&BlobId>); 3] = [
                ("image", c.image.blob()),
                ("kernel", c.kernel.as_ref()),
                ("initrd", c.initrd.as_ref()),
            ];
            for (field, id) in ids {
                let Some(id) = id else { continue };
                match self.repo.grant_for(id, &m.service.provider).await {
                    Ok(true) => {}
                    Ok(false) => missing.push(format!(
                        "manifest field `component[{i}].{field}`: {id} is not in the image repository, or not an image provider {:?} may use",
                        m.service.provider
                    )),
                    Err(e) => missing.push(format!("manifest field `component[{i}].{field}`: cannot check {id}: {e}")),
                }
            }
        }
        let provider = m.service.provider.clone();
        for (i, c) in m.components.iter_mut().enumerate() {
            if let Err(e) = self.resolve_image(c, &provider).await {
                missing.push(format!("manifest field `component[{i}].{e}"));
            }
        }
        if !missing.is_empty() {
            return Err(Refusal(missing));
        }
        Ok(m)
    }

    /// `c`'s registry image checked for `provider` and named by its
    /// digest. Errors start with the field (`image` or `cmdline`) and give
    /// the reason.
    async fn resolve_image(&self, c: &mut Component, provider: &str) -> Result<(), String> {
        let ImageRef::Registry(image) = &c.image else { return Ok(()) };
        self.registries.check_use(image, provider).map_err(|e| format!("image`: {e}"))?;
        let artifact = self.registries.resolve(image).await.map_err(|e| format!("image`: {e}"))?;
        if c.cmdline.is_some() && c.kernel.is_none() && artifact.kernel.is_none() {
            return Err(format!(
                "cmdline`: a kernel command line needs a kernel, and neither `kernel` nor the artifact of {image} has one"
            ));
        }
        c.image = ImageRef::Registry(image.resolved(artifact.digest));
        Ok(())
    }

    /// `image` (a content ID or a registry reference) checked for
    /// `provider` as a manifest's `image` is (one it may use: its own,
    /// shared with it or public; a registry image in a trusted registry,
    /// within its scope, a VEE image artifact) and named by its digest (a
    /// tag resolved). Used by a rolling update's new image. Errors: the
    /// reason, without a field name.
    pub async fn checked_image(&self, image: &str, provider: &str) -> Result<String, String> {
        let parsed: ImageRef = image.parse().map_err(|e| format!("{e}"))?;
        match &parsed {
            ImageRef::Repository(id) => match self.repo.grant_for(id, provider).await {
                Ok(true) => Ok(image.to_string()),
                Ok(false) => Err(format!(
                    "{id} is not in the image repository, or not an image provider {provider:?} may use"
                )),
                Err(e) => Err(format!("cannot check {id}: {e}")),
            },
            ImageRef::Registry(r) => {
                self.registries.check_use(r, provider).map_err(|e| e.to_string())?;
                let artifact = self.registries.resolve(r).await.map_err(|e| e.to_string())?;
                Ok(ImageRef::Registry(r.resolved(artifact.digest)).to_string())
            }
        }
    }

    /// The planner request of `m` as service `service_id`, with UUID VEE
    /// IDs, its window padded for the VEEs' overheads ([`Windows::padding`](crate::steps::windows::Windows::padding)).
    pub fn request(&self, m: &Manifest, service_id: &str) -> ServiceRequest {
        let mut req = ServiceRequest::from_manifest(service_id, m, &self.slots, self.clock.now(), self.windows.horizon_slots())
            .padded(self.windows.padding(&m.sla, None), self.now_slot());
        for c in &mut req.components {
            for v in &mut c.vees {
                *v = uuid::Uuid::new_v4().to_string();
            }
        }
        req
    }

    /// Negotiate: accept, counter-offer (earliest feasible window) or reject
    /// with reasons (a refused manifest is a reject naming each field).
    /// Reserves nothing.
    pub async fn negotiate(&self, caller: &Role, toml: &str) -> Offer {
        let m = match self.check_manifest(caller, toml).await {
            Ok(m) => m,
            Err(Refusal(reasons)) => {
                self.metrics.negotiation(crate::domain::offer::Verdict::Reject.as_str());
                return Offer::reject(reasons);
            }
        };
        let req = self.request(&m, &uuid::Uuid::new_v4().to_string());
        let snapshot = self.planner.lock().unwrap().snapshot();
        let verdict = snapshot.negotiate(&req);
        let offer = self.reply(&req, verdict);
        self.metrics.negotiation(offer.verdict.as_str());
        offer
    }

    /// A refusal's extra reason when configured hosts do not answer (they
    /// may be why): how many, without their names, which a provider may not
    /// learn (E §3.4); the VEEM's log names each with its endpoint.
    fn hosts_not_answering(&self) -> Option<String> {
        let names = self.hosts.names();
        let silent = names
            .iter()
            .filter(|h| matches!(self.hosts.health(h), crate::domain::Health::Unknown | crate::domain::Health::Failed))
            .count();
        (silent > 0).then(|| {
            format!(
                "{silent} of the site's {} hosts do not answer (the site's log names them with their endpoints)",
                names.len()
            )
        })
    }

    /// The answer to `req` (its service window, not the padded reservation).
    pub(super) fn reply(&self, req: &ServiceRequest, verdict: Admission) -> Offer {
        let clock = self.slots;
        let window = |w: crate::planner::SlotRange| {
            let w = req.service_window(w);
            Some((clock.start_of(w.start), clock.start_of(w.end)))
        };
        match verdict {
            Admission::Accepted(a) => Offer {
                verdict: Verdict::Accept,
                reasons: vec![],
                window: window(a.window),
            },
            Admission::CounterOffer { window: w, reasons } => Offer {
                verdict: Verdict::CounterOffer,
                reasons,
                window: window(w),
            },
            Admission::Rejected { mut reasons, .. } => {
                reasons.extend(self.hosts_not_answering());
                Offer::reject(reasons)
            }
            Admission::NeedsPeerSpare { .. } => Offer {
                verdict: Verdict::Accept,
                reasons: vec![
                    "guarantee full: Deploy asks a peer site to hold a spare for each VEE and refuses the manifest if none does".into(),
                ],
                window: None,
            },
        }
    }
}
