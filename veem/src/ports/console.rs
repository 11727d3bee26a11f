//! A VEE's serial console as the workflows reach it: at its host
//! ([`HostConsole`], VHI AttachConsole, a client-streaming call the VHI's
//! server trait cannot carry) or at a peer site (`Peer::attach_console`,
//! VMI AttachConsole), and the requests of either.

use std::pin::Pin;

use futures::Stream;
use interfaces::vhi;
use tonic::Status;

use super::{BoxStream, GrpcHost};

/// What is typed into a console, chunk by chunk; its end ends the
/// session.
pub type ConsoleInput = Pin<Box<dyn Stream<Item = Vec<u8>> + Send>>;

/// What a console shows: what the guest wrote, or a notice of a relay
/// (the VEE moved and the console was attached again).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConsoleOutput {
    Data(Vec<u8>),
    Notice(String),
}

/// An attached console's output; it ends with the session.
pub type ConsoleStream = BoxStream<ConsoleOutput>;

/// A VEE's serial console at its host (VHI AttachConsole).
#[tonic::async_trait]
pub trait HostConsole: Send + Sync {
    /// Attaches to the console of `vee_id` (`force`: take it from a
    /// session that holds it): `input` is typed into the guest, the
    /// stream carries what it writes until the domain stops or leaves
    /// the host. Errors: the VHI's (NotFound, FailedPrecondition while
    /// another session holds it).
    async fn open_console(&self, vee_id: &str, force: bool, input: ConsoleInput) -> Result<ConsoleStream, Status>;
}

/// The requests of a console session over the VHI or the VMI: the first
/// names the VEE, the others carry `input`.
pub(super) fn console_requests<Req: Send + 'static>(
    first: Req,
    input: ConsoleInput,
    data: impl Fn(Vec<u8>) -> Req + Send + 'static,
) -> impl Stream<Item = Req> + Send {
    use futures::StreamExt;
    futures::stream::once(async move { first }).chain(input.map(data))
}

#[tonic::async_trait]
impl HostConsole for GrpcHost {
    async fn open_console(&self, vee_id: &str, force: bool, input: ConsoleInput) -> Result<ConsoleStream, Status> {
        use futures::StreamExt;
        let first = vhi::AttachConsoleRequest {
            vee_id: vee_id.into(),
            force,
            data: vec![],
        };
        let requests = console_requests(first, input, |data| vhi::AttachConsoleRequest {
            data,
            ..Default::default()
        });
        let out = self.0.clone().attach_console(requests).await?.into_inner();
        Ok(Box::pin(out.map(|r| r.map(|m| ConsoleOutput::Data(m.data)))))
    }
}
