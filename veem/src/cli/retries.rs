//! When a command asks the site's VEEM again, with the same request ID:
//! a Deploy unanswered or made stale ([`deploy_again`]), any command whose
//! VEEM went away mid-call ([`leader_lost`]).

use interfaces::vmi;

use super::client::VmiServiceClient;

/// Whether `s` says the site's control plane is read-only (its store has
/// no quorum): asking again does not help.
pub(crate) fn read_only(s: &tonic::Status) -> bool {
    s.metadata().get(interfaces::fencing::READ_ONLY).is_some()
}

/// Whether Deploy's answer `s` is worth asking again with the same request
/// ID: the VEEM unreachable or its answer lost (UNAVAILABLE, its control
/// plane not read-only), or the site's plan changed under each of the
/// VEEM's attempts (ABORTED: other admissions committed meanwhile). A call
/// that failed keeps no reply (`api::server::replies`): asked again, it
/// runs again, and a service is still deployed once.
fn deploy_again(s: &tonic::Status) -> bool {
    match s.code() {
        tonic::Code::Unavailable => !read_only(s),
        tonic::Code::Aborted => true,
        _ => false,
    }
}

/// Deploys `req`, asking again with the same request ID while
/// [`deploy_again`] says so, at most `retry.attempts` times: the VEEM
/// deploys the service once.
pub(crate) async fn deploy_idempotent(
    c: &mut VmiServiceClient,
    req: vmi::DeployRequest,
    retry: interfaces::retry::RetryPolicy,
) -> Result<vmi::ServiceInfo, tonic::Status> {
    let unanswered = |s: &tonic::Status| {
        let again = deploy_again(s);
        if again {
            tracing::warn!(request_id = %req.request_id, error = %s.message(), "Deploy not done (unanswered, or its plans went stale); asking again with the same request ID");
        }
        again
    };
    let call = || {
        let (mut c, req) = (c.clone(), req.clone());
        async move { c.deploy(req).await }
    };
    let answer = retry.run_while(call, unanswered).await?;
    Ok(answer.into_inner())
}

/// How many times a command is run again after its VEEM went away
/// mid-call ([`leader_lost`]).
pub const LEADER_RETRIES: u32 = 3;

/// Whether `e` says the VEEM that was called went away mid-call (killed,
/// frozen past the keep-alive: the connection lost; or standing by, or
/// starting, after a takeover: marked `vee-not-acting`), so that the
/// site's leader, now or soon another, is to be asked again; not when the
/// site's store is read-only (asking again does not help), nor for the
/// leader's own UNAVAILABLE (a host it could not reach: its answer, whose
/// message may well speak of a connection). An UNAVAILABLE is a lost
/// connection only when it was made on this side, from the transport's
/// error, which it keeps as its source (an answer of the VEEM has none);
/// an UNKNOWN, INTERNAL or CANCELLED one when it names the transport.
pub(crate) fn leader_lost(e: &anyhow::Error) -> bool {
    let Some(s) = e.chain().find_map(|c| c.downcast_ref::<tonic::Status>()) else {
        return false;
    };
    let m = s.message();
    let transport = [
        "transport error",
        "connection",
        "h2 protocol error",
        "http2 error",
        "keep-alive",
        "broken pipe",
    ]
    .iter()
    .any(|w| m.contains(w));
    let made_here = std::error::Error::source(s).is_some();
    match s.code() {
        tonic::Code::Unavailable => !read_only(s) && (interfaces::fencing::not_acting(s) || (made_here && transport)),
        tonic::Code::Unknown | tonic::Code::Internal | tonic::Code::Cancelled => transport,
        _ => false,
    }
}

/// `s` as tonic makes a status on the client's side: from the
/// transport's error, kept as its source (for tests).
#[cfg(test)]
pub(crate) fn made_here(s: tonic::Status) -> tonic::Status {
    #[derive(Debug)]
    struct Transport(tonic::Status);
    impl std::fmt::Display for Transport {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "transport: {}", self.0.message())
        }
    }
    impl std::error::Error for Transport {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
    tonic::Status::from_error(Box::new(Transport(s)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Deploy answered ABORTED (every plan the VEEM made went stale under
    /// other admissions) is asked again, as one whose answer was lost; a
    /// read-only site's, a refusal's or a bad request's is not.
    #[test]
    fn a_deploy_is_asked_again_after_aborted_and_unanswered_answers_only() {
        assert!(deploy_again(&tonic::Status::aborted(
            "the site's plan changed under each of 5 attempts; try again"
        )));
        assert!(deploy_again(&tonic::Status::unavailable("transport error")));
        let mut read_only = tonic::Status::unavailable("no quorum");
        read_only
            .metadata_mut()
            .insert(interfaces::fencing::READ_ONLY, tonic::metadata::MetadataValue::from_static("1"));
        assert!(!deploy_again(&read_only));
        assert!(!deploy_again(&tonic::Status::failed_precondition("rejected: no host fits")));
        assert!(!deploy_again(&tonic::Status::invalid_argument("field `sla`")));
    }

    /// The VEEM's own UNAVAILABLE (a host it could not reach), whatever
    /// its words, is its answer: not asked again; a connection lost on
    /// this side (the status made from the transport's error) is.
    #[test]
    fn only_a_connection_lost_on_this_side_asks_the_leader_again() {
        let answer = tonic::Status::unavailable("host a1 did not answer: transport error: connection refused");
        assert!(!leader_lost(&anyhow::Error::new(answer)));
        let lost = tonic::Status::from_error(Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection reset by peer",
        )));
        assert!(leader_lost(&anyhow::Error::new(lost)));
        assert!(leader_lost(&anyhow::Error::new(made_here(tonic::Status::unavailable(
            "transport error: connection reset"
        )))));
        let mut not_acting = tonic::Status::unavailable("standing by");
        not_acting
            .metadata_mut()
            .insert(interfaces::fencing::NOT_ACTING, tonic::metadata::MetadataValue::from_static("1"));
        assert!(leader_lost(&anyhow::Error::new(not_acting)));
    }

    /// What [`leader_lost`] tells a failure of the connection by: a call
    /// that fails on this side (here, a port nobody listens on) keeps the
    /// transport's error as its status's source.
    #[tokio::test]
    async fn a_call_that_fails_on_this_side_keeps_the_transport_error() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let channel = tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{port}"))
            .unwrap()
            .connect_lazy();
        let mut c = vmi::vmi_service_client::VmiServiceClient::new(channel);
        let e = c.get_service(vmi::GetServiceRequest::default()).await.unwrap_err();
        assert!(std::error::Error::source(&e).is_some(), "{e:?}");
    }
}
