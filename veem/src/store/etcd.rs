//! [`Engine`] in etcd (the v3 API, through the `etcd-client` crate): a
//! site's records in a cluster its VEEMs share (DESIGN.md §11). Every
//! record is one key, `<prefix>/<tree>/<key>`; a commit is one etcd
//! transaction, its conditions ([`Unchanged`]) compares of each key's
//! `mod_revision` with the revision its writer read it at, so the store
//! revision is etcd's own. A VEEM that leads its site also fences every
//! commit with the election key it holds ([`EtcdEngine::fence_with`]):
//! a leader whose lease is gone writes nothing, whatever it believes.
//!
//! Checked against Debian 12's etcd 3.4.23: KV, Txn, Lease, Watch and the
//! election API are there; `RangeStream` (3.7) is not, so a scan reads
//! pages of [`PAGE`] keys, each at the first page's revision (one
//! snapshot). The crate does not move to another endpoint when one is
//! down (etcdv3/etcd-client#39): a call that could not connect is tried
//! on the next, which is safe, since it never reached a member.
//!
//! The engine's calls are synchronous, as the [`Engine`] contract is: each
//! runs on the engine's own runtime (one thread) and is waited for, within
//! the configured timeout, as sled's writes wait for the disk.

use std::future::Future;
use std::sync::RwLock;
use std::time::Duration;

use anyhow::{anyhow, Context};
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
};

use super::engine::{Conflict, Engine, Revision, Unchanged, Visit, Write};
use super::{StoreError, Tree};

/// A store call's result.
type Result<T, E = StoreError> = std::result::Result<T, E>;

mod watch;
pub use watch::{Change, Changes, WatchEnded};

/// Keys a scan reads at once.
pub const PAGE: i64 = 1000;

/// The etcd cluster's members and how to reach them (`[store]` of the
/// configuration: [`crate::config::StoreConfig`]).
#[derive(Clone, Debug)]
pub struct EtcdOptions {
    /// Client URLs of the members, `https://` (or `http://` where the
    /// configuration allows plaintext).
    pub endpoints: Vec<String>,
    /// The CA of the members' certificates and this VEEM's client
    /// certificate and key (PEM files); `None`: plaintext.
    pub tls: Option<interfaces::tls::TlsFiles>,
    /// The site's key prefix, e.g. `/vee/site-a` (no trailing `/`).
    pub prefix: String,
    /// How long one call may take before it fails as unavailable.
    pub timeout: Duration,
}

/// The control plane's store does not answer (no quorum, no member
/// reachable, a call over its time): nothing was written that the caller
/// can count on; a write may yet have been applied (etcd says no more).
#[derive(Debug, thiserror::Error)]
#[error("the site's control plane store (etcd) does not answer: {0}; it is read-only until it does")]
pub struct StoreUnavailable(pub String);

/// A commit refused because this VEEM no longer holds the site's
/// leadership it was fenced with (its election key is gone or another's):
/// nothing written.
#[derive(Debug, thiserror::Error)]
#[error("this VEEM no longer leads the site (its election key of epoch {epoch} is gone): nothing committed")]
pub struct Fenced {
    pub epoch: i64,
}

/// The election key a leader holds and its create revision (its epoch).
#[derive(Clone, Debug)]
struct Fence {
    key: Vec<u8>,
    epoch: i64,
}

/// [`Engine`] over an etcd cluster (see the module doc).
pub struct EtcdEngine {
    client: Client,
    options: EtcdOptions,
    prefix: Vec<u8>,
    fence: RwLock<Option<Fence>>,
    /// The engine's own runtime: its calls are made and awaited there.
    rt: Option<tokio::runtime::Runtime>,
}

impl Drop for EtcdEngine {
    fn drop(&mut self) {
        // Dropping a runtime may block; the engine may be dropped inside
        // another runtime.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// How a client of the cluster of `o` connects: 2 s to connect, HTTP/2
/// pings, the TLS of `o`; each call cut after `o.timeout` when `per_call`
/// (the engine's calls, which also fail at once on a member without a
/// raft leader: an election under way, or no quorum; the request was not
/// applied, so it is tried again), never otherwise (a campaign, a lease's
/// keep-alive: they wait on purpose). Errors: unreadable TLS files.
fn connect_options(o: &EtcdOptions, per_call: bool) -> Result<ConnectOptions> {
    let mut opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_keep_alive(Duration::from_secs(5), Duration::from_secs(3));
    if per_call {
        opts = opts.with_timeout(o.timeout).with_require_leader(true);
    }
    if let Some(tls) = &o.tls {
        let read = |p: &std::path::Path| std::fs::read(p).with_context(|| format!("read {}", p.display()));
        opts = opts.with_tls(
            etcd_client::TlsOptions::new()
                .ca_certificate(etcd_client::Certificate::from_pem(read(&tls.ca)?))
                .identity(etcd_client::Identity::from_pem(read(&tls.cert)?, read(&tls.key)?)),
        );
    }
    Ok(opts)
}

/// Whether `e` means the request may be sent again: it never reached a
/// member, the member had no raft leader, or its leader changed while the
/// request waited (see each case).
fn not_sent(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::TransportError(_) => true,
        // Unavailable (14), as tonic says of a connection it could not
        // make, and as etcd says without a leader; "leader changed" while
        // the request waited (it may have been applied: a commit sent
        // again then finds its conditions failed, a Conflict, and the
        // record is read again; its unconditioned puts write the same
        // values); Unknown (2) with
        // tonic's "transport error", a connection to a member that died
        // (a commit sent again finds its conditions failed if it was
        // applied after all, and its puts write the same values).
        etcd_client::Error::GRpcStatus(s) => {
            let (code, m) = (s.code() as i32, s.message());
            code == 14 && (m.contains("connect") || m.contains("no leader") || m.contains("leader changed"))
                || code == 2 && m.contains("transport error")
        }
        _ => false,
    }
}

/// How a call failed: the store did not answer (no quorum, no member, a
/// timeout: its outcome unknown), or refused it (too large, malformed).
enum Failure {
    Unavailable(String),
    Refused(String),
}

impl Failure {
    fn of(e: &etcd_client::Error) -> Self {
        match e {
            etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => Failure::Unavailable(e.to_string()),
            etcd_client::Error::GRpcStatus(s) => {
                // Cancelled (1: the client's deadline), DeadlineExceeded
                // (4), Unavailable (14: no leader, timed out); Unknown (2)
                // with the server's "context deadline exceeded".
                let code = s.code() as i32;
                let said = format!("{} ({})", s.message(), s.code());
                if matches!(code, 1 | 4 | 14) || code == 2 && s.message().contains("deadline") {
                    Failure::Unavailable(said)
                } else {
                    Failure::Refused(said)
                }
            }
            _ => Failure::Refused(e.to_string()),
        }
    }
}

/// The end of the range of keys that start with `prefix`.
fn range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

impl EtcdEngine {
    /// An engine over the cluster of `o` (connected lazily: the first call
    /// fails when no member answers). Errors: unreadable TLS files, a
    /// malformed endpoint.
    pub fn connect(o: &EtcdOptions) -> Result<Self> {
        if o.endpoints.is_empty() {
            return Err(anyhow!("no etcd endpoint").into());
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("veem-etcd")
            .enable_all()
            .build()
            .context("the etcd engine's runtime")?;
        let opts = connect_options(o, true)?;
        // Connected on the engine's runtime (the caller may be inside
        // another, where blocking on one is not allowed).
        let endpoints = o.endpoints.clone();
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        rt.spawn(async move {
            let _ = tx.send(Client::connect(endpoints, Some(opts)).await);
        });
        let client = rx
            .recv()
            .map_err(|_| anyhow!("etcd client not made"))?
            .map_err(|e| anyhow!("etcd endpoints {:?}: {e}", o.endpoints))?;
        Ok(Self {
            client,
            options: o.clone(),
            prefix: format!("{}/", o.prefix.trim_end_matches('/')).into_bytes(),
            fence: RwLock::new(None),
            rt: Some(rt),
        })
    }

    /// From now on every commit also requires that `key` (the election
    /// key this VEEM holds) still has create revision `epoch`; `None`
    /// lifts the fence. The leadership's own keys are outside the site's
    /// prefix of records.
    pub fn fence_with(&self, fence: Option<(Vec<u8>, i64)>) {
        *self.fence.write().unwrap() = fence.map(|(key, epoch)| Fence { key, epoch });
    }

    /// A client of the same cluster, with the engine's per-call timeout.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// A client of the same cluster without a per-call timeout, on the
    /// caller's runtime: for calls that wait on purpose (a campaign, a
    /// lease's keep-alive stream, a watch). Errors: unreadable TLS files.
    pub async fn waiting_client(&self) -> Result<Client> {
        Client::connect(self.options.endpoints.clone(), Some(connect_options(&self.options, false)?))
            .await
            .map_err(|e| anyhow!("etcd endpoints {:?}: {e}", self.options.endpoints).into())
    }

    /// The name of the site's election (`<prefix>/leader`: beside the
    /// records' trees, never scanned with them): `crate::leadership`
    /// campaigns there, and the records are in use while it has a key.
    pub fn election(&self) -> String {
        format!("{}/leader", self.options.prefix.trim_end_matches('/'))
    }

    /// Whether a VEEM leads the site or campaigns for it (a key in its
    /// election, `<prefix>/leader/`): the records are in use.
    pub fn in_use(&self) -> Result<bool> {
        let k = format!("{}/", self.election()).into_bytes();
        self.run("etcd election", move |mut c| {
            let k = k.clone();
            async move {
                let r = c.get(k, Some(GetOptions::new().with_prefix().with_count_only())).await?;
                Ok(r.count() > 0)
            }
        })
    }

    /// The site's key prefix (`[store] prefix`).
    pub fn prefix(&self) -> &str {
        &self.options.prefix
    }

    fn key(&self, t: Tree, key: &[u8]) -> Vec<u8> {
        let mut k = self.prefix.clone();
        k.extend_from_slice(t.name().as_bytes());
        k.push(b'/');
        k.extend_from_slice(key);
        k
    }

    /// Runs `call` (with a clone of the client) on the engine's runtime and
    /// waits for it, within the timeout; a call that was not applied (no
    /// member reached, a member without a leader) is tried again, on the
    /// next endpoint, until the timeout.
    fn run<T, F, Fut>(&self, what: &str, call: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(Client) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, etcd_client::Error>> + Send,
    {
        let (client, timeout) = (self.client.clone(), self.options.timeout);
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let rt = self.rt.as_ref().expect("runtime until dropped");
        rt.spawn(async move {
            let deadline = tokio::time::Instant::now() + timeout;
            let mut last = Failure::Unavailable(String::new());
            while tokio::time::Instant::now() < deadline {
                match tokio::time::timeout_at(deadline, call(client.clone())).await {
                    Ok(Ok(v)) => {
                        let _ = tx.send(Ok(v));
                        return;
                    }
                    Ok(Err(e)) if not_sent(&e) => {
                        last = Failure::Unavailable(e.to_string());
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Ok(Err(e)) => {
                        let _ = tx.send(Err(Failure::of(&e)));
                        return;
                    }
                    Err(_) => {
                        last = Failure::Unavailable(format!("no answer within {timeout:?}"));
                        break;
                    }
                }
            }
            let _ = tx.send(Err(last));
        });
        match rx.recv() {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(Failure::Unavailable(e))) => Err(StoreError::unavailable(what, e)),
            Ok(Err(Failure::Refused(e))) => Err(anyhow!("{what}: etcd refused: {e}").into()),
            Err(_) => Err(StoreError::unavailable(what, "the engine stopped")),
        }
    }

    /// Reads every record of tree `t` at revision `at` (`None`: now) in
    /// pages of [`PAGE`] keys, each at the first page's revision (one
    /// snapshot); returns that revision.
    fn scan_at(&self, t: Tree, at: Option<i64>, f: Visit) -> Result<i64> {
        self.scan_range(t, b"", usize::MAX, at, f)
    }

    /// Reads the records of tree `t` from key `start` on, `limit` at most,
    /// at revision `at` (`None`: now) as [`EtcdEngine::scan_at`] does;
    /// returns the revision read at.
    fn scan_range(&self, t: Tree, start: &[u8], limit: usize, at: Option<i64>, f: Visit) -> Result<i64> {
        let prefix = self.key(t, b"");
        let end = range_end(&prefix);
        let mut from = self.key(t, start);
        let mut at = at;
        let mut left = limit;
        loop {
            let (start, stop) = (from.clone(), end.clone());
            let page = PAGE.min(i64::try_from(left).unwrap_or(PAGE));
            if page == 0 {
                return Ok(at.unwrap_or(0));
            }
            let (kvs, revision, more) = self.run("etcd scan", move |mut c| {
                let (start, stop) = (start.clone(), stop.clone());
                async move {
                    let mut o = GetOptions::new().with_range(stop).with_limit(page);
                    if let Some(r) = at {
                        o = o.with_revision(r);
                    }
                    let r = c.get(start, Some(o)).await?;
                    let kvs: Vec<(Vec<u8>, Vec<u8>)> = r.kvs().iter().map(|kv| (kv.key().to_vec(), kv.value().to_vec())).collect();
                    Ok((kvs, r.header().map_or(0, |h| h.revision()), r.more()))
                }
            })?;
            let snapshot = *at.get_or_insert(revision);
            left -= kvs.len();
            for (k, v) in &kvs {
                f(&k[prefix.len()..], v)?;
            }
            match kvs.last() {
                Some((last, _)) if more => {
                    from = last.clone();
                    from.push(0);
                }
                _ => return Ok(snapshot),
            }
        }
    }

    /// The cluster's revision now.
    fn revision_now(&self) -> Result<Revision> {
        let k = self.key(Tree::Meta, b"");
        self.run("etcd revision", move |mut c| {
            let k = k.clone();
            async move {
                let r = c.get(k, Some(GetOptions::new().with_count_only())).await?;
                Ok(r.header().map_or(0, |h| h.revision().max(0) as u64))
            }
        })
    }

    fn fence(&self) -> Option<Fence> {
        self.fence.read().unwrap().clone()
    }
}

impl Engine for EtcdEngine {
    fn get(&self, t: Tree, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let k = self.key(t, key);
        self.run("etcd get", move |mut c| {
            let k = k.clone();
            async move {
                let r = c.get(k, None).await?;
                Ok(r.kvs().first().map(|kv| kv.value().to_vec()))
            }
        })
    }

    fn scan(&self, t: Tree, f: Visit) -> Result<()> {
        self.scan_at(t, None, f).map(|_| ())
    }

    fn revision(&self) -> Result<Revision> {
        self.revision_now()
    }

    fn commit(&self, writes: Vec<Write>, unchanged: &[Unchanged]) -> Result<Revision> {
        let fence = self.fence();
        // Not written since: its mod_revision no later than `since`; and,
        // seen then, not removed since (etcd keeps no revision of a
        // removal: the key must still have been created).
        let mut when: Vec<Compare> = Vec::new();
        for c in unchanged {
            let k = self.key(c.tree, &c.key);
            when.push(Compare::mod_revision(k.clone(), CompareOp::Less, c.since as i64 + 1));
            if c.existed {
                when.push(Compare::create_revision(k, CompareOp::Greater, 0));
            }
        }
        let mut otherwise: Vec<TxnOp> = unchanged.iter().map(|c| TxnOp::get(self.key(c.tree, &c.key), None)).collect();
        if let Some(f) = &fence {
            when.push(Compare::create_revision(f.key.clone(), CompareOp::Equal, f.epoch));
            otherwise.push(TxnOp::get(f.key.clone(), None));
        }
        // etcd refuses a transaction that names a key twice: the last
        // write of each key is the one that counts.
        let mut seen = std::collections::HashSet::new();
        let mut ops: Vec<TxnOp> = Vec::with_capacity(writes.len());
        for (t, k, v) in writes.iter().rev() {
            let key = self.key(*t, k);
            if seen.insert(key.clone()) {
                ops.push(match v {
                    Some(v) => TxnOp::put(key, v.clone(), None),
                    None => TxnOp::delete(key, None),
                });
            }
        }
        ops.reverse();
        let n = writes.len();
        let (succeeded, revision, found) = self.run(&format!("etcd commit of {n} records"), move |mut c| {
            let txn = Txn::new().when(when.clone()).and_then(ops.clone()).or_else(otherwise.clone());
            async move {
                let r = c.txn(txn).await?;
                // (mod revision, create revision) of each key asked, if
                // there.
                let found: Vec<Option<(i64, i64)>> = r
                    .op_responses()
                    .into_iter()
                    .map(|op| match op {
                        TxnOpResponse::Get(g) => g.kvs().first().map(|kv| (kv.mod_revision(), kv.create_revision())),
                        _ => None,
                    })
                    .collect();
                Ok((r.succeeded(), r.header().map_or(0, |h| h.revision()), found))
            }
        })?;
        if succeeded {
            return Ok(revision.max(0) as u64);
        }
        // Which condition failed: the fence first, then the first record
        // written since it was read.
        if let Some(f) = &fence {
            let held = found.last().cloned().flatten().is_some_and(|(_, created)| created == f.epoch);
            if !held {
                return Err(Fenced { epoch: f.epoch }.into());
            }
        }
        for (c, seen) in unchanged.iter().zip(&found) {
            let written = match seen {
                Some((modified, _)) if *modified as u64 > c.since => *modified as u64,
                // Removed since it was read: when, etcd does not keep;
                // no later than now.
                None if c.existed => revision.max(0) as u64,
                _ => continue,
            };
            return Err(Conflict {
                tree: c.tree,
                key: String::from_utf8_lossy(&c.key).into_owned(),
                since: c.since,
                written,
            }
            .into());
        }
        Err(anyhow!("etcd commit refused: a condition failed that the answer does not show").into())
    }

    fn insert_new(&self, t: Tree, key: &[u8], value: Vec<u8>) -> Result<bool> {
        // A commit on the condition that the key was never written, or is
        // gone (etcd's mod_revision of an absent key is 0), fenced as
        // every commit is.
        let absent = Unchanged {
            tree: t,
            key: key.to_vec(),
            since: 0,
            existed: false,
        };
        match self.commit(vec![(t, key.to_vec(), Some(value))], &[absent]) {
            Ok(_) => Ok(true),
            Err(StoreError::Conflict(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn scan_from(&self, t: Tree, start: &[u8], limit: usize, f: Visit) -> Result<()> {
        self.scan_range(t, start, limit, None, f).map(|_| ())
    }

    fn scan_back(&self, t: Tree, limit: usize, f: Visit) -> Result<()> {
        let prefix = self.key(t, b"");
        let end = range_end(&prefix);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let start = prefix.clone();
        let kvs = self.run("etcd scan back", move |mut c| {
            let (start, end) = (start.clone(), end.clone());
            async move {
                let o = GetOptions::new()
                    .with_range(end)
                    .with_limit(limit)
                    .with_sort(SortTarget::Key, SortOrder::Descend);
                let r = c.get(start, Some(o)).await?;
                Ok(r.kvs()
                    .iter()
                    .map(|kv| (kv.key().to_vec(), kv.value().to_vec()))
                    .collect::<Vec<_>>())
            }
        })?;
        Ok(kvs.iter().try_for_each(|(k, v)| f(&k[prefix.len()..], v))?)
    }

    fn count(&self, t: Tree) -> Result<u64> {
        let prefix = self.key(t, b"");
        self.run("etcd count", move |mut c| {
            let prefix = prefix.clone();
            async move {
                let r = c.get(prefix, Some(GetOptions::new().with_prefix().with_count_only())).await?;
                Ok(r.count().max(0) as u64)
            }
        })
    }

    fn remove_before(&self, t: Tree, end: &[u8]) -> Result<Revision> {
        // One range delete (a transaction holds 128 operations at most),
        // fenced as every commit is.
        let (start, end) = (self.key(t, b""), self.key(t, end));
        let fence = self.fence();
        let when: Vec<Compare> = fence
            .iter()
            .map(|f| Compare::create_revision(f.key.clone(), CompareOp::Equal, f.epoch))
            .collect();
        let (succeeded, revision) = self.run(&format!("etcd removal of {} records", t.name()), move |mut c| {
            let remove = TxnOp::delete(start.clone(), Some(DeleteOptions::new().with_range(end.clone())));
            let txn = Txn::new().when(when.clone()).and_then(vec![remove]);
            async move {
                let r = c.txn(txn).await?;
                Ok((r.succeeded(), r.header().map_or(0, |h| h.revision().max(0) as u64)))
            }
        })?;
        match fence {
            Some(f) if !succeeded => Err(Fenced { epoch: f.epoch }.into()),
            _ => Ok(revision),
        }
    }

    fn next_id(&self) -> Result<u64> {
        // The revision of a write: greater than every one before, across
        // the cluster and its restarts.
        let k = self.key(Tree::Meta, b"_next_id");
        self.run("etcd next id", move |mut c| {
            let k = k.clone();
            async move {
                let r = c.put(k, Vec::<u8>::new(), None).await?;
                Ok(r.header().map_or(0, |h| h.revision().max(0) as u64))
            }
        })
    }
}
