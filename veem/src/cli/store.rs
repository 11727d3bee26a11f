//! `veem store migrate`: a site's records from one store to another
//! (`crate::store::migrate`), each store named `sled:PATH` or `etcd` (the
//! `[store]` of the daemon's configuration); `veem store
//! forget-peer-epoch`: a peer's newest epoch forgotten in the site's store.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use crate::config::VeemConfig;
use crate::store::migrate::{copy, Copied};
use crate::store::{Engine, EtcdEngine, SledEngine, Store};

/// An engine named by `spec` for the site of `cfg`. Errors: a malformed
/// spec, a store that cannot be opened, one in use.
fn engine(cfg: &VeemConfig, spec: &str) -> Result<Arc<dyn Engine>> {
    if let Some(path) = spec.strip_prefix("sled:") {
        let e = SledEngine::open(Path::new(path)).with_context(|| format!("{spec}: is a VEEM using it? stop it first"))?;
        return Ok(Arc::new(e));
    }
    if spec == "etcd" {
        if cfg.store.endpoints.is_empty() {
            bail!("etcd: the configuration's [store] names no endpoints");
        }
        let e = EtcdEngine::connect(&cfg.store.etcd(&cfg.site_id))?;
        if e.in_use()? {
            bail!(
                "etcd {:?}: a VEEM of site {} leads or campaigns there: stop the site's VEEMs first",
                e.prefix(),
                cfg.site_id
            );
        }
        return Ok(Arc::new(e));
    }
    bail!("{spec:?}: a store is `sled:PATH` or `etcd`")
}

/// Copies the records of the site of `config` from `from` to `to` and
/// checks them (see `crate::store::migrate`). The source is brought to
/// the current format first; it must belong to the configuration's site.
pub fn migrate(config: &Path, from: &str, to: &str) -> Result<Copied> {
    let cfg = VeemConfig::load(config)?;
    if from == to {
        bail!("--from and --to name the same store");
    }
    let source = engine(&cfg, from)?;
    let store = Store::on(source.clone(), from)?;
    match store.get::<String>(crate::store::Tree::Meta, "site_id")? {
        Some(site) if site != cfg.site_id => bail!("{from} holds site {site:?}, not {:?}", cfg.site_id),
        _ => {}
    }
    let target = engine(&cfg, to)?;
    copy(&*source, &*target).with_context(|| format!("copy {from} -> {to}"))
}

/// Forgets the newest epoch kept of peer `site` in the store of the VEEM
/// configured by `config` (`crate::workflows::peer_epochs::forget`); over
/// etcd the site's VEEMs may run. Errors: the configuration, or the store
/// cannot be opened (a sled database a VEEM holds), naming it.
pub fn forget_peer_epoch(config: &Path, site: &str) -> Result<Option<i64>> {
    let cfg = VeemConfig::load(config)?;
    let store = match cfg.store.engine {
        crate::config::EngineKind::Sled => {
            let e = SledEngine::open(&cfg.db).with_context(|| format!("{}: is a VEEM using it? stop it first", cfg.db.display()))?;
            Store::on(Arc::new(e), "sled")?
        }
        crate::config::EngineKind::Etcd => Store::on(Arc::new(EtcdEngine::connect(&cfg.store.etcd(&cfg.site_id))?), "etcd")?,
    };
    Ok(crate::workflows::peer_epochs::forget(&store, site)?)
}
