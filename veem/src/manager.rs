//! `Veem`, the VEE manager of one site: the [`Core`] every workflow shares
//! and every workflow, each a value of its own (`crate::workflows`), built
//! once in [`Veem::with_store`] after the workflows it calls. The core is
//! a field like the others (`veem.core`), not what `Veem` dereferences to:
//! what a caller takes from it is written where it takes it.

use std::sync::Arc;

use anyhow::Result;

use crate::config::{EngineKind, VeemConfig};
use crate::core::{Core, Loaded};
use crate::ports::Ports;
use crate::steps::abroad::Abroad;
use crate::steps::background::Background;
use crate::steps::boot::Boot;
use crate::steps::checkpoints::Checkpoints;
use crate::steps::intents::Intents;
use crate::steps::networks::Networks;
use crate::steps::site_constraints::SiteConstraints;
use crate::steps::sla::Sla;
use crate::steps::spares::Spares;
use crate::steps::stop::Stop;
use crate::steps::windows::Windows;
use crate::store::{EtcdEngine, Store};
use crate::workflows::accounting::Accounting;
use crate::workflows::consoles::Consoles;
use crate::workflows::deploy::Deploy;
use crate::workflows::elasticity::Elasticity;
use crate::workflows::federation::Federation;
use crate::workflows::lifecycle::Lifecycle;
use crate::workflows::migration::Migration;
use crate::workflows::peer_epochs::PeerEpochs;
use crate::workflows::peer_watch::PeerWatch;
use crate::workflows::proposals::Proposals;
use crate::workflows::reconcile::Reconcile;
use crate::workflows::recovery::Recovery;
use crate::workflows::remapping::Remapping;
use crate::workflows::resizing::Resizing;
use crate::workflows::rollout::Rollouts;
use crate::workflows::scaling::Scaling;

/// The VEE manager of one site.
pub struct Veem {
    /// The records, planner, ports and clock every workflow shares.
    pub core: Arc<Core>,
    /// The steps (`crate::steps`) and workflows (`crate::workflows`),
    /// each built once on the core and on the steps and workflows it calls.
    pub accounting: Arc<Accounting>,
    pub deploy: Arc<Deploy>,
    pub scaling: Arc<Scaling>,
    pub rollouts: Arc<Rollouts>,
    pub resizing: Arc<Resizing>,
    pub elasticity: Arc<Elasticity>,
    pub lifecycle: Arc<Lifecycle>,
    pub reconcile: Arc<Reconcile>,
    pub peer_watch: Arc<PeerWatch>,
    pub peer_epochs: Arc<PeerEpochs>,
    pub proposals: Arc<Proposals>,
    pub recovery: Arc<Recovery>,
    pub migration: Arc<Migration>,
    pub federation: Arc<Federation>,
    pub remapping: Arc<Remapping>,
    pub background: Arc<Background>,
    pub checkpoints: Arc<Checkpoints>,
    pub consoles: Arc<Consoles>,
    pub boot: Arc<Boot>,
    pub abroad: Arc<Abroad>,
    pub stop: Arc<Stop>,
    pub windows: Arc<Windows>,
    pub networks: Arc<Networks>,
    pub spares: Arc<Spares>,
    pub intents: Arc<Intents>,
    pub site_constraints: Arc<SiteConstraints>,
    pub sla: Arc<Sla>,
}

impl Veem {
    /// Opens the database and restores the planner (or starts an empty
    /// one), talking to hosts, peers and the repository over the network.
    pub fn open(cfg: VeemConfig) -> Result<Arc<Self>> {
        Self::open_measured(cfg, Default::default())
    }

    /// [`Veem::open`], counting in `metrics` (the daemon's, which its
    /// metrics listener reports).
    pub fn open_measured(cfg: VeemConfig, metrics: Arc<crate::metrics::VeemMetrics>) -> Result<Arc<Self>> {
        let ports = Ports::connect(&cfg, None, metrics)?;
        Self::with_ports(cfg, ports)
    }

    /// The VEEM of a site's leader over `store` (the site's etcd cluster,
    /// its commits fenced by the election key of `epoch`): its calls to
    /// hosts carry `epoch` (`interfaces::fencing`). Its records and planner
    /// are `loaded` (a standby's copy, `crate::core::replica`), or read
    /// from the store when `None`. It counts in `metrics` (the daemon's,
    /// kept across terms).
    pub fn open_leading(
        cfg: VeemConfig,
        store: Store,
        epoch: i64,
        loaded: Option<Loaded>,
        metrics: Arc<crate::metrics::VeemMetrics>,
    ) -> Result<Arc<Self>> {
        let ports = Ports::connect(&cfg, Some(epoch), metrics)?;
        let core = match loaded {
            Some(loaded) => Core::open_loaded(cfg, ports, store, loaded)?,
            None => Core::open(cfg, ports, store)?,
        };
        Ok(Self::on_core(core))
    }

    /// [`Veem::open`] with the given ports (tests: in-memory fakes).
    pub fn with_ports(cfg: VeemConfig, ports: Ports) -> Result<Arc<Self>> {
        let store = store_of(&cfg)?;
        Self::with_store(cfg, ports, store)
    }

    /// [`Veem::with_ports`] over database `store` (the simulation's: in
    /// memory) instead of the one at `cfg.db`. Errors: as [`Core::open`].
    pub fn with_store(cfg: VeemConfig, ports: Ports, store: Store) -> Result<Arc<Self>> {
        Ok(Self::on_core(Core::open(cfg, ports, store)?))
    }

    /// The workflows built on `core`.
    fn on_core(core: Core) -> Arc<Self> {
        let core = Arc::new(core);
        // In dependency order: a workflow after those it calls.
        let accounting = Arc::new(Accounting::new(core.clone()));
        let windows = Arc::new(Windows::new(core.clone()));
        let networks = Arc::new(Networks::new(core.clone()));
        let spares = Arc::new(Spares::new(core.clone()));
        let intents = Arc::new(Intents::new(core.clone()));
        let peer_epochs = Arc::new(PeerEpochs::new(core.clone()));
        let site_constraints = Arc::new(SiteConstraints::new(core.clone()));
        let sla = Arc::new(Sla::new(core.clone()));
        let checkpoints = Arc::new(Checkpoints::new(core.clone()));
        let consoles = Arc::new(Consoles::new(core.clone()));
        let background = Arc::new(Background::new(core.clone(), checkpoints.clone()));
        let boot = Arc::new(Boot::new(core.clone(), networks.clone()));
        let abroad = Arc::new(Abroad::new(core.clone(), checkpoints.clone()));
        let stop = Arc::new(Stop::new(
            core.clone(),
            abroad.clone(),
            boot.clone(),
            networks.clone(),
            spares.clone(),
        ));
        let remapping = Arc::new(Remapping::new(core.clone(), windows.clone(), background.clone()));
        let federation = Arc::new(Federation::new(
            core.clone(),
            networks.clone(),
            site_constraints.clone(),
            spares.clone(),
            windows.clone(),
            boot.clone(),
            checkpoints.clone(),
        ));
        let migration = Arc::new(Migration::new(
            core.clone(),
            federation.clone(),
            networks.clone(),
            site_constraints.clone(),
            sla.clone(),
            spares.clone(),
        ));
        let recovery = Arc::new(Recovery {
            core: core.clone(),
            background: background.clone(),
            boot: boot.clone(),
            checkpoints: checkpoints.clone(),
            federation: federation.clone(),
            migration: migration.clone(),
            networks: networks.clone(),
            remapping: remapping.clone(),
            sla: sla.clone(),
            windows: windows.clone(),
            slots: Default::default(),
        });
        let proposals = Arc::new(Proposals::new(core.clone(), migration.clone()));
        let peer_watch = Arc::new(PeerWatch::new(
            core.clone(),
            federation.clone(),
            migration.clone(),
            networks.clone(),
            recovery.clone(),
        ));
        let reconcile = Arc::new(Reconcile::new(core.clone(), boot.clone(), migration.clone(), recovery.clone()));
        let lifecycle = Arc::new(Lifecycle {
            core: core.clone(),
            boot: boot.clone(),
            checkpoints: checkpoints.clone(),
            abroad: abroad.clone(),
            migration: migration.clone(),
            networks: networks.clone(),
            recovery: recovery.clone(),
            sla: sla.clone(),
            spares: spares.clone(),
            stop: stop.clone(),
            windows: windows.clone(),
        });
        let deploy = Arc::new(Deploy {
            core: core.clone(),
            request_locks: Default::default(),
            background: background.clone(),
            boot: boot.clone(),
            federation: federation.clone(),
            intents: intents.clone(),
            networks: networks.clone(),
            remapping: remapping.clone(),
            spares: spares.clone(),
            windows: windows.clone(),
        });
        let scaling = Arc::new(Scaling {
            core: core.clone(),
            locks: Default::default(),
            background: background.clone(),
            boot: boot.clone(),
            federation: federation.clone(),
            intents: intents.clone(),
            networks: networks.clone(),
            spares: spares.clone(),
            stop: stop.clone(),
        });
        let resizing = Arc::new(Resizing::new(core.clone()));
        let elasticity = Arc::new(Elasticity {
            core: core.clone(),
            accounting: accounting.clone(),
            scaling: scaling.clone(),
            resizing: resizing.clone(),
            states: Default::default(),
        });
        let rollouts = Arc::new(Rollouts {
            core: core.clone(),
            boot: boot.clone(),
            checkpoints: checkpoints.clone(),
            deploy: deploy.clone(),
            scaling: scaling.clone(),
        });
        // (the next workflow here)
        Arc::new(Self {
            resizing,
            rollouts,
            elasticity,
            scaling,
            accounting,
            windows,
            networks,
            spares,
            intents,
            site_constraints,
            sla,
            checkpoints,
            consoles,
            background,
            boot,
            abroad,
            stop,
            remapping,
            federation,
            migration,
            recovery,
            proposals,
            peer_watch,
            peer_epochs,
            reconcile,
            lifecycle,
            deploy,
            // (its field here)
            core,
        })
    }

    /// The core the workflows share.
    pub fn core(&self) -> &Arc<Core> {
        &self.core
    }
}

/// The store `cfg` names: the sled database at `db`, or the site's etcd
/// cluster (`[store]`). Errors: it cannot be opened, or holds a newer
/// format.
fn store_of(cfg: &VeemConfig) -> Result<Store> {
    match cfg.store.engine {
        EngineKind::Sled => Ok(Store::open(&cfg.db)?),
        EngineKind::Etcd => {
            let o = cfg.store.etcd(&cfg.site_id);
            let what = format!("etcd {:?} at {}", o.prefix, o.endpoints.join(","));
            Ok(Store::on(Arc::new(EtcdEngine::connect(&o)?), &what)?)
        }
    }
}
