//! A peer site whose VEEMs are several (a leader and standbys over etcd,
//! issue 38): its calls go to the endpoint that led last; a standby's
//! answer (UNAVAILABLE naming the leader in `vee-leader`: it did nothing)
//! sends the call on to the leader it names, if that is one of the peer's
//! configured endpoints, and a connection that could not be made sends it
//! to the next endpoint. Any other answer, a refusal or an error of the
//! leader's, is the call's. A console's input goes from one attempt to
//! the next ([`Relayed`]).

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;

use interfaces::vhi;
use tonic::Status;

use super::{ConsoleInput, ConsoleStream, GrpcPeer, Peer};
use crate::domain::peer::{IncomingVee, MigrationOutcome, RemoteVee, SpareRequest, UsageReceipt};
use crate::domain::Action;
use crate::model::UsageRec;

/// See the module doc.
pub struct Following {
    /// Each endpoint and its client.
    peers: Vec<(String, GrpcPeer)>,
    /// The endpoint that answered last.
    current: AtomicUsize,
}

/// Where an UNAVAILABLE answer says to go: the leader a standby names
/// (`Ok(Some)`), the next endpoint after a connection that could not be
/// made or was lost (`Ok(None)`), or nowhere: the answer is the call's
/// (`Err`).
fn redirect(s: &Status) -> Result<Option<String>, ()> {
    if s.code() != tonic::Code::Unavailable {
        return Err(());
    }
    if let Some(leader) = s.metadata().get(interfaces::fencing::LEADER).and_then(|v| v.to_str().ok()) {
        return Ok(Some(leader.to_string()));
    }
    let standby = s
        .metadata()
        .get(interfaces::fencing::NOT_ACTING)
        .is_some_and(|v| v.as_bytes() == b"standby");
    let m = s.message();
    // A connection not made, or lost (a frozen VEEM's pings unanswered:
    // "http2 error", keep-alive timed out).
    if standby || m.contains("connect") || m.contains("transport error") || m == "http2 error" {
        return Ok(None);
    }
    Err(())
}

impl Following {
    /// A peer at `peers` (endpoint, client), tried first to last.
    pub fn new(peers: Vec<(String, GrpcPeer)>) -> Self {
        Self {
            peers,
            current: AtomicUsize::new(0),
        }
    }

    /// `call` on the endpoint that leads (see the module doc): each
    /// endpoint is tried once at most.
    async fn call<R, F, Fut>(&self, call: F) -> Result<R, Status>
    where
        F: Fn(GrpcPeer) -> Fut,
        Fut: Future<Output = Result<R, Status>>,
    {
        let n = self.peers.len();
        let mut i = self.current.load(Ordering::Relaxed) % n;
        let mut last = None;
        for _ in 0..n {
            match call(self.peers[i].1.clone()).await {
                Err(s) => match redirect(&s) {
                    Ok(to) => {
                        // The answer kept is a site's (a standby's) over a
                        // connection not made.
                        let keep = last.as_ref().is_none_or(|l: &Status| !interfaces::fencing::not_acting(l));
                        i = to
                            .and_then(|url| {
                                self.peers
                                    .iter()
                                    .position(|(e, _)| e.trim_end_matches('/') == url.trim_end_matches('/'))
                            })
                            .unwrap_or((i + 1) % n);
                        if keep {
                            last = Some(s);
                        }
                    }
                    Err(()) => return Err(s),
                },
                ok => {
                    self.current.store(i, Ordering::Relaxed);
                    return ok;
                }
            }
        }
        Err(last.unwrap_or_else(|| Status::unavailable("no endpoint of the peer site answered")))
    }
}

#[tonic::async_trait]
impl Peer for Following {
    async fn prepare_incoming(&self, v: IncomingVee) -> Result<vhi::IncomingTarget, Status> {
        self.call(|p| {
            let v = v.clone();
            async move { p.prepare_incoming(v).await }
        })
        .await
    }
    async fn complete_incoming(&self, vee_id: &str) -> Result<RemoteVee, Status> {
        self.call(|p| async move { p.complete_incoming(vee_id).await }).await
    }
    async fn abort_incoming(&self, vee_id: &str) -> Result<(), Status> {
        self.call(|p| async move { p.abort_incoming(vee_id).await }).await
    }
    async fn withdraw(&self, vee_id: &str) -> Result<(), Status> {
        self.call(|p| async move { p.withdraw(vee_id).await }).await
    }
    async fn send_vee(&self, vee_id: &str, target: vhi::IncomingTarget) -> Result<MigrationOutcome, Status> {
        self.call(|p| {
            let target = target.clone();
            async move { p.send_vee(vee_id, target).await }
        })
        .await
    }
    async fn push_usage(&self, from_site: &str, records: &[UsageRec]) -> Result<UsageReceipt, Status> {
        self.call(|p| async move { p.push_usage(from_site, records).await }).await
    }
    async fn get_vee(&self, vee_id: &str) -> Result<RemoteVee, Status> {
        self.call(|p| async move { p.get_vee(vee_id).await }).await
    }
    async fn vee_action(&self, vee_id: &str, action: Action, checkpoint_id: &str) -> Result<RemoteVee, Status> {
        self.call(|p| async move { p.vee_action(vee_id, action, checkpoint_id).await })
            .await
    }
    async fn update_network(&self, u: vhi::NetworkUpdate) -> Result<(), Status> {
        self.call(|p| {
            let u = u.clone();
            async move { p.update_network(u).await }
        })
        .await
    }
    async fn reserve_spare(&self, r: &SpareRequest) -> Result<i64, Status> {
        self.call(|p| async move { p.reserve_spare(r).await }).await
    }
    async fn confirm_spare(&self, vee_id: &str) -> Result<(), Status> {
        self.call(|p| async move { p.confirm_spare(vee_id).await }).await
    }
    async fn release_spare(&self, vee_id: &str) -> Result<(), Status> {
        self.call(|p| async move { p.release_spare(vee_id).await }).await
    }
    /// As the other calls: `input` goes from an attempt that failed to
    /// the next ([`Relayed`]).
    async fn attach_console(&self, vee_id: &str, force: bool, input: ConsoleInput) -> Result<ConsoleStream, Status> {
        let input = Relayed::new(input);
        self.call(|p| {
            let input = input.next_attempt();
            async move { p.attach_console(vee_id, force, input).await }
        })
        .await
    }
}

/// A console's input handed to one attempt of a call after another: the
/// input of an attempt ends as soon as the next one starts, so that an
/// attempt that failed (its request stream may still be polled until the
/// transport drops it) cannot read what is typed for the next. What an
/// attempt read before it failed (keys typed during the few milliseconds
/// of a standby's answer) is lost.
struct Relayed {
    input: Mutex<ConsoleInput>,
    attempt: AtomicUsize,
}

impl Relayed {
    fn new(input: ConsoleInput) -> Arc<Self> {
        Arc::new(Self {
            input: Mutex::new(input),
            attempt: AtomicUsize::new(0),
        })
    }

    /// The input of a new attempt (the previous attempt's ends).
    fn next_attempt(self: &Arc<Self>) -> ConsoleInput {
        let mine = self.attempt.fetch_add(1, Ordering::SeqCst) + 1;
        let me = self.clone();
        Box::pin(futures::stream::poll_fn(move |cx| {
            if me.attempt.load(Ordering::SeqCst) != mine {
                return Poll::Ready(None);
            }
            me.input.lock().unwrap_or_else(|e| e.into_inner()).as_mut().poll_next(cx)
        }))
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;
    use crate::ports::ConsoleOutput;

    #[tokio::test]
    async fn a_consoles_input_goes_on_to_the_next_attempt_and_leaves_the_failed_one() {
        let (keys, typed) = tokio::sync::mpsc::channel::<Vec<u8>>(8);
        let relayed = Relayed::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(typed)));
        let mut first = relayed.next_attempt();
        keys.send(b"a".to_vec()).await.unwrap();
        assert_eq!(first.next().await, Some(b"a".to_vec()));
        let mut second = relayed.next_attempt();
        keys.send(b"b".to_vec()).await.unwrap();
        assert_eq!(first.next().await, None, "the failed attempt reads no more");
        assert_eq!(second.next().await, Some(b"b".to_vec()));
        drop(keys);
        assert_eq!(second.next().await, None, "it ends with the input");
    }

    /// Peer site-b at `endpoints` (comma-separated, plain HTTP).
    fn following(endpoints: &str) -> Following {
        let entry: crate::config::PeerEntry = toml::from_str(&format!(
            "site_id = \"site-b\"\nendpoint = \"{endpoints}\"\ntoken = \"a-peer-token-long-enough\"\n[agreement]\n"
        ))
        .unwrap();
        let peers = entry
            .endpoints()
            .into_iter()
            .map(|e| (e.clone(), GrpcPeer::new(&entry, &e, None, true, None).unwrap()))
            .collect();
        Following::new(peers)
    }

    #[tokio::test]
    async fn a_console_is_attached_at_the_next_endpoint_when_the_last_one_does_not_answer() {
        let vmi = crate::cli::tests::mock::serve(Default::default()).await;
        // A port nothing listens on: the endpoint that answered last.
        let gone = format!(
            "http://{}",
            std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
        );
        let following = following(&format!("{gone},{vmi}"));
        let (keys, typed) = tokio::sync::mpsc::channel::<Vec<u8>>(8);
        let mut out = following
            .attach_console("vee-1", false, Box::pin(tokio_stream::wrappers::ReceiverStream::new(typed)))
            .await
            .unwrap();
        let shown = out.next().await.unwrap().unwrap();
        assert_eq!(shown, ConsoleOutput::Data(b"console of vee-1\r\n".to_vec()));
        keys.send(b"uname\r".to_vec()).await.unwrap();
        assert_eq!(out.next().await.unwrap().unwrap(), ConsoleOutput::Data(b"UNAME\r".to_vec()));
    }

    /// A leader frozen (SIGSTOP: the kernel still takes its connections)
    /// is given up within seconds, by the connection's keep-alive, and
    /// the call goes on to the next endpoint.
    #[tokio::test]
    async fn a_frozen_leaders_call_goes_on_to_the_next_endpoint_within_seconds() {
        let vmi = crate::cli::tests::mock::serve(Default::default()).await;
        let frozen = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let frozen_ep = format!("http://{}", frozen.local_addr().unwrap());
        let following = following(&format!("{frozen_ep},{vmi}"));
        let started = std::time::Instant::now();
        let (keys, typed) = tokio::sync::mpsc::channel::<Vec<u8>>(8);
        let attached = tokio::time::timeout(
            std::time::Duration::from_secs(20),
            following.attach_console("vee-1", false, Box::pin(tokio_stream::wrappers::ReceiverStream::new(typed))),
        )
        .await
        .expect("waited on the frozen leader");
        let mut out = attached.unwrap();
        assert_eq!(
            out.next().await.unwrap().unwrap(),
            ConsoleOutput::Data(b"console of vee-1\r\n".to_vec())
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(8), "{:?}", started.elapsed());
        drop(keys);
    }

    #[test]
    fn only_a_standbys_answer_or_a_connection_not_made_goes_elsewhere() {
        let mut standby = Status::unavailable("this VEEM stands by for site b: its leader is at https://b2:7200");
        standby
            .metadata_mut()
            .insert(interfaces::fencing::LEADER, "https://b2:7200".parse().unwrap());
        assert_eq!(redirect(&standby), Ok(Some("https://b2:7200".into())));
        let mut no_leader = Status::unavailable("this VEEM stands by for site b, which has no leader now");
        no_leader
            .metadata_mut()
            .insert(interfaces::fencing::NOT_ACTING, "standby".parse().unwrap());
        assert_eq!(redirect(&no_leader), Ok(None));
        assert_eq!(
            redirect(&Status::unavailable("error trying to connect: tcp connect error")),
            Ok(None)
        );
        assert_eq!(redirect(&Status::unavailable("http2 error")), Ok(None), "keep-alive timed out");
        // The leader's own answers are the call's: its store did not
        // answer (the outcome unknown), or it refused.
        let store = Status::unavailable("the site's control plane store (etcd) does not answer");
        assert_eq!(redirect(&store), Err(()));
        assert_eq!(redirect(&Status::failed_precondition("no room")), Err(()));
    }
}
