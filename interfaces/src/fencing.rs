//! Fencing tokens beyond the store (issue 38, item 3; DESIGN.md §11, after
//! Kleppmann's "How to do distributed locking"): every call a leading VEEM
//! makes to its hosts carries its epoch (the create revision of the
//! election key it holds) in the `vee-epoch` metadata ([`Stamp`]); a host
//! keeps the newest epoch it has seen, on disk, and refuses a call of an
//! older one ([`Gate`]): a leader that stalled past its lease and woke up
//! cannot command a host the new leader has spoken to. A call without an
//! epoch (a VEEM on the embedded store, which has no election) passes.
//! And the metadata by which a standby names its leader ([`LEADER`]).

// Interceptors and their checks return tonic's `Status`, as tonic's
// traits require; it is large, and that is tonic's choice to make.
#![allow(clippy::result_large_err)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tonic::metadata::MetadataValue;
use tonic::service::Interceptor;
use tonic::{Request, Status};

/// The metadata key of the epoch.
pub const EPOCH: &str = "vee-epoch";

/// The metadata key (and HTTP header) by which a standby VEEM names the
/// VMI URL of its site's leader in its UNAVAILABLE answers: clients and
/// peers go there (what it answered was not acted on).
pub const LEADER: &str = "vee-leader";

/// The metadata key (and HTTP header) by which a VEEM marks an
/// UNAVAILABLE answer as its site's control plane being read-only (its
/// store has no quorum or does not answer): asking again at once, or of
/// another VEEM of the site, does not help; nothing was written.
pub const READ_ONLY: &str = "vee-read-only";

/// The metadata key (and HTTP header) by which a VEEM marks an
/// UNAVAILABLE answer as given while its site's control plane cannot act:
/// `standby` (it stands by; a takeover may be under way), `starting` (a
/// leader reconciling with its hosts), `read-only` (its store has no
/// quorum). The site answers and its VEEs run on their hosts, so a peer
/// does not count the answer as silence.
pub const NOT_ACTING: &str = "vee-not-acting";

/// Whether `s`, a failed call's status, was answered by a VEEM whose
/// site's control plane cannot act now ([`NOT_ACTING`]): the site is
/// there, unlike after a connection not made or a call not answered.
pub fn not_acting(s: &Status) -> bool {
    s.code() == tonic::Code::Unavailable && s.metadata().get(NOT_ACTING).is_some()
}

/// Adds the caller's epoch to every request (nothing without one).
#[derive(Clone, Copy, Debug, Default)]
pub struct Stamp(pub Option<i64>);

impl Interceptor for Stamp {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(e) = self.0 {
            req.metadata_mut().insert(EPOCH, MetadataValue::from(e));
        }
        Ok(req)
    }
}

/// The epoch of `req`: `None` without one. Errors: one that is not a
/// positive integer.
pub fn epoch_of<T>(req: &Request<T>) -> Result<Option<i64>, Status> {
    let Some(v) = req.metadata().get(EPOCH) else {
        return Ok(None);
    };
    v.to_str()
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|e| *e > 0)
        .map(Some)
        .ok_or_else(|| Status::invalid_argument(format!("metadata `{EPOCH}`: not a positive integer")))
}

/// The newest epoch a server has seen, kept in a file so that a restart
/// does not forget it; refuses a call of an older one (FAILED_PRECONDITION,
/// naming both).
#[derive(Clone)]
pub struct Gate {
    newest: Arc<Mutex<i64>>,
    file: Arc<PathBuf>,
}

impl Gate {
    /// The gate whose newest epoch is kept in `file` (read now; 0 when the
    /// file is missing). Errors: the file cannot be read or holds no
    /// number.
    pub fn open(file: &Path) -> anyhow::Result<Self> {
        let newest = match std::fs::read_to_string(file) {
            Ok(s) => s
                .trim()
                .parse::<i64>()
                .map_err(|e| anyhow::anyhow!("{}: not an epoch: {e}", file.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(anyhow::anyhow!("{}: {e}", file.display())),
        };
        Ok(Self {
            newest: Arc::new(Mutex::new(newest)),
            file: Arc::new(file.to_path_buf()),
        })
    }

    /// The newest epoch seen.
    pub fn newest(&self) -> i64 {
        *self.newest.lock().unwrap()
    }

    /// Admits a call of epoch `epoch` (`None`: none given) or refuses it;
    /// a newer epoch is written to the file (durably: a temporary file,
    /// synced, renamed) before the call is admitted.
    pub fn admit(&self, epoch: Option<i64>) -> Result<(), Status> {
        let Some(e) = epoch else { return Ok(()) };
        let mut newest = self.newest.lock().unwrap();
        if e < *newest {
            return Err(Status::failed_precondition(format!(
                "fenced: this call comes from a VEEM of epoch {e}, and a VEEM of epoch {} has since led the site",
                *newest
            )));
        }
        if e > *newest {
            write_durably(&self.file, &e.to_string())
                .map_err(|err| Status::unavailable(format!("cannot keep the newest epoch {e}: {err}")))?;
            *newest = e;
        }
        Ok(())
    }
}

impl Interceptor for Gate {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        self.admit(epoch_of(&req)?)?;
        Ok(req)
    }
}

fn write_durably(file: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = file.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, file)?;
    if let Some(dir) = file.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(epoch: Option<i64>) -> Request<()> {
        Stamp(epoch).call(Request::new(())).unwrap()
    }

    #[test]
    fn an_older_epoch_is_refused_a_newer_one_kept_across_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("epoch");
        let mut gate = Gate::open(&file).unwrap();
        assert!(gate.call(call(None)).is_ok(), "no epoch: a VEEM without an election");
        assert!(gate.call(call(Some(7))).is_ok());
        assert!(gate.call(call(Some(7))).is_ok(), "the same leader again");
        let e = gate.call(call(Some(5))).unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition);
        assert!(
            e.message().contains("epoch 5") && e.message().contains("epoch 7"),
            "{}",
            e.message()
        );
        assert!(gate.call(call(Some(12))).is_ok());
        let mut again = Gate::open(&file).unwrap();
        assert_eq!(again.newest(), 12, "kept on disk");
        assert!(again.call(call(Some(7))).is_err());
        let mut bad = Request::new(());
        bad.metadata_mut().insert(EPOCH, "-3".parse().unwrap());
        assert_eq!(again.call(bad).unwrap_err().code(), tonic::Code::InvalidArgument);
    }

    #[test]
    fn only_a_marked_unavailable_answer_says_the_site_is_there() {
        let mut standby = Status::unavailable("this VEEM stands by");
        standby.metadata_mut().insert(NOT_ACTING, "standby".parse().unwrap());
        assert!(not_acting(&standby));
        assert!(!not_acting(&Status::unavailable("tcp connect error")), "a connection not made");
        let mut refused = Status::failed_precondition("fenced");
        refused.metadata_mut().insert(NOT_ACTING, "standby".parse().unwrap());
        assert!(!not_acting(&refused), "only UNAVAILABLE");
    }
}
