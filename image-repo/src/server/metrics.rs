//! The repository's Prometheus metrics (`[metrics]` in its configuration,
//! served by `interfaces::metrics`): every family in the table of
//! docs/operator-guide.md ("The image repository"), which a test below
//! checks against what the registry has, and the process's own
//! (`process_*`).

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use super::AppState;

/// Where content that failed its verification came from.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    /// `upload` or `peer`.
    pub source: &'static str,
}

/// The repository's metrics; the gauges are set from the store at each
/// scrape ([`RepoMetrics::exporter`]).
#[derive(Clone, Debug, Default)]
pub struct RepoMetrics {
    pub received_bytes: Counter,
    pub sent_bytes: Counter,
    pub verification_failures: Family<SourceLabels, Counter>,
    /// Bytes of the blobs `missing` queries found stored and readable:
    /// not sent again.
    pub deduplicated_bytes: Counter,
    blobs: Gauge,
    stored_bytes: Gauge,
}

impl RepoMetrics {
    /// Counts a verification failure of content from `source` (`upload`,
    /// `peer`).
    pub fn verification_failed(&self, source: &'static str) {
        self.verification_failures.get_or_create(&SourceLabels { source }).inc();
    }

    fn register(&self, r: &mut Registry) {
        r.register_with_unit(
            "received",
            "Bytes of blobs stored (uploads and pull-throughs)",
            Unit::Bytes,
            self.received_bytes.clone(),
        );
        r.register_with_unit("sent", "Bytes of blob content sent", Unit::Bytes, self.sent_bytes.clone());
        r.register_with_unit(
            "deduplicated",
            "Bytes of the chunks missing queries found stored: not sent again",
            Unit::Bytes,
            self.deduplicated_bytes.clone(),
        );
        r.register("blobs", "Blobs stored", self.blobs.clone());
        r.register_with_unit("stored", "Bytes of the blobs stored", Unit::Bytes, self.stored_bytes.clone());
        r.register(
            "verification_failures",
            "Content refused because it did not hash to its digest",
            self.verification_failures.clone(),
        );
    }

    /// The exporter of `app`'s metrics under `cfg`, ready while it serves.
    /// Errors: `cfg`'s token digest is malformed.
    pub fn exporter(app: &AppState, cfg: &interfaces::metrics::MetricsConfig) -> anyhow::Result<interfaces::metrics::Exporter> {
        let m = app.metrics.clone();
        let store_of = app.clone();
        let refresh = Arc::new(move || {
            m.blobs.set(store_of.store.blob_count() as i64);
            m.stored_bytes.set(store_of.store.total_size() as i64);
        });
        let register = |r: &mut Registry| app.metrics.register(r);
        Ok(interfaces::metrics::Exporter::new(
            cfg,
            "image_repo",
            register,
            Some(refresh),
            Arc::new(|| Ok(())),
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The operator guide's table of the repository's metrics is what a
    /// scrape shows: every family registered, with its type and labels.
    #[test]
    fn the_operator_guides_image_repo_metrics_are_the_registered_ones() {
        let m = RepoMetrics::default();
        m.received_bytes.inc_by(10);
        m.sent_bytes.inc_by(10);
        m.deduplicated_bytes.inc_by(10);
        m.verification_failed("upload");
        m.blobs.set(1);
        m.stored_bytes.set(10);
        let mut r = Registry::default();
        m.register(r.sub_registry_with_prefix("image_repo"));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        let doc = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operator-guide.md");
        interfaces::metrics::reference::check(&doc, "### The image repository (`image_repo_`)", &text);
    }
}
