//! What a user may type for a service, a VEE or a migration besides its
//! full ID, as with `kubectl` or `openstack server show NAME`: a unique
//! prefix of the ID (at least [`MIN_PREFIX`] characters, as git's short
//! hashes), a service by its name, a VEE by `COMPONENT-INSTANCE` (`web-0`,
//! its DNS label) or `SERVICE/COMPONENT-INSTANCE`. Resolved with the
//! caller's own list calls, so a provider finds only what it may see. The
//! word is first sent as it is; only when the VEEM answers NotFound is it
//! looked up ([`or_lookup`]): a word that matches nothing keeps the VEEM's
//! NotFound, a word that matches several is an error listing them.

use anyhow::bail;

use super::client::VmiServiceClient;

/// What a word names.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Service,
    Vee,
    Migration,
}

/// `call` with `word`; if the VEEM answers NotFound and `word` is not a
/// full ID, `call` again with the ID `word` names as a `kind` (see the
/// module doc). Errors: `call`'s, or a word naming several.
pub async fn or_lookup<T, Fut>(
    c: &VmiServiceClient,
    word: &str,
    kind: Kind,
    call: impl Fn(VmiServiceClient, String) -> Fut,
) -> anyhow::Result<T>
where
    Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    match call(c.clone(), word.to_string()).await {
        Err(s) if s.code() == tonic::Code::NotFound && !is_full_id(word) => {
            let mut lc = c.clone();
            let id = match kind {
                Kind::Service => service(&mut lc, word).await?,
                Kind::Vee => vee(&mut lc, word).await?,
                Kind::Migration => migration(&mut lc, word).await?,
            };
            if id == word {
                return Err(s.into());
            }
            Ok(call(c.clone(), id).await?.into_inner())
        }
        r => Ok(r?.into_inner()),
    }
}

/// Shortest ID prefix taken as a short ID.
pub const MIN_PREFIX: usize = 4;

fn is_full_id(s: &str) -> bool {
    uuid::Uuid::parse_str(s).is_ok()
}

/// The one candidate `matches` keeps, by ID; `what` names the kind in the
/// error for several.
fn one(word: &str, what: &str, found: Vec<(String, String)>) -> anyhow::Result<String> {
    match found.len() {
        0 => Ok(word.to_string()),
        1 => Ok(found.into_iter().next().unwrap().0),
        _ => {
            let list: Vec<String> = found.iter().map(|(id, label)| format!("{id} ({label})")).collect();
            bail!("{word:?} names several {what}s: {}; give more of the ID", list.join(", "))
        }
    }
}

fn prefix_of(word: &str, id: &str) -> bool {
    word.len() >= MIN_PREFIX && id.starts_with(word)
}

/// A service's ID from its ID, a unique ID prefix or its name.
pub async fn service(c: &mut VmiServiceClient, word: &str) -> anyhow::Result<String> {
    if is_full_id(word) {
        return Ok(word.into());
    }
    let services = super::pages::services(c).await?;
    let found = services
        .iter()
        .filter(|s| s.name == word || prefix_of(word, &s.service_id))
        .map(|s| (s.service_id.clone(), s.name.clone()))
        .collect();
    one(word, "service", found)
}

/// A VEE's ID from its ID, a unique ID prefix, `COMPONENT-INSTANCE` or
/// `SERVICE/COMPONENT-INSTANCE` (SERVICE a name or ID prefix).
pub async fn vee(c: &mut VmiServiceClient, word: &str) -> anyhow::Result<String> {
    if is_full_id(word) {
        return Ok(word.into());
    }
    let (svc, label) = match word.split_once('/') {
        Some((s, l)) => (Some(service(c, s).await?), l),
        None => (None, word),
    };
    let vees = super::pages::vees(c, svc.as_deref().unwrap_or_default()).await?;
    let found = vees
        .iter()
        .filter(|v| {
            let name = format!("{}-{}", v.component.to_ascii_lowercase(), v.instance);
            name == label.to_ascii_lowercase() || (svc.is_none() && prefix_of(label, &v.vee_id))
        })
        .map(|v| (v.vee_id.clone(), format!("{}-{} of {}", v.component, v.instance, v.service_id)))
        .collect();
    one(word, "VEE", found)
}

/// A migration's ID from its ID or a unique prefix.
pub async fn migration(c: &mut VmiServiceClient, word: &str) -> anyhow::Result<String> {
    if is_full_id(word) {
        return Ok(word.into());
    }
    let list = super::pages::migrations(c).await?;
    let found = list
        .iter()
        .filter(|m| prefix_of(word, &m.migration_id))
        .map(|m| (m.migration_id.clone(), format!("{} of {}", m.state(), m.vee_id)))
        .collect();
    one(word, "migration", found)
}
