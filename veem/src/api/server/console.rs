//! VMI AttachConsole: the caller's requests become what is typed, the
//! relay's output (`workflows::consoles`) becomes the responses, each as
//! the caller's role may read it (a notice or an error redacted of hosts
//! and sites for a provider, E §3.4).

use futures::StreamExt;
use interfaces::vmi::{AttachConsoleRequest, AttachConsoleResponse};
use tonic::{Request, Status, Streaming};

use super::{BoxStream, VmiService};
use crate::config::Role;
use crate::ports::{ConsoleInput, ConsoleOutput};

/// Bytes of one request's `data` at most (64 KiB, as the VHI's).
pub const MAX_INPUT: usize = 64 * 1024;

impl VmiService {
    /// The console of the VEE the first request names, for its provider,
    /// the operator, or a peer site for a VEE run here for it (see
    /// `vmi.proto`). Errors: InvalidArgument (no VEE named, `data` over
    /// [`MAX_INPUT`]), NotFound (no such VEE the caller may see),
    /// FailedPrecondition (it does not run; another session holds the
    /// console).
    pub(super) async fn console(&self, r: Request<Streaming<AttachConsoleRequest>>) -> Result<BoxStream<AttachConsoleResponse>, Status> {
        let role = self.caller(&r)?;
        // A peer's session ends when a newer leader of that peer is seen.
        let fenced = self.fenced_later(&role, &r)?;
        let mut requests = r.into_inner();
        let first = requests
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("field `vee_id`: the first request names the VEE"))?;
        if first.vee_id.is_empty() {
            return Err(Status::invalid_argument("field `vee_id`: the first request names the VEE"));
        }
        check(&first)?;
        let (vee_id, force) = (first.vee_id.clone(), first.force);
        // What is typed, until the caller ends its side; a request over
        // the bound ends the session.
        let typed = futures::stream::once(async move { first.data })
            .chain(futures::stream::unfold(requests, |mut rs| async move {
                match rs.message().await {
                    Ok(Some(m)) if check(&m).is_ok() => Some((m.data, rs)),
                    _ => None,
                }
            }))
            .filter(|d| std::future::ready(!d.is_empty()));
        let out = self.console_for(&role, &vee_id, force, Box::pin(typed)).await?;
        Ok(Box::pin(futures::StreamExt::take_until(out, fenced)))
    }

    /// The console of VEE `vee_id` for `role` (see [`VmiService::console`]),
    /// `input` typed into it: the VMI's stream and the web console's
    /// WebSocket alike. Errors: NotFound (a VEE `role` may not see),
    /// FailedPrecondition (it does not run; another session holds it).
    pub(crate) async fn console_for(
        &self,
        role: &Role,
        vee_id: &str,
        force: bool,
        input: ConsoleInput,
    ) -> Result<BoxStream<AttachConsoleResponse>, Status> {
        self.visible_vee(role, vee_id)?;
        let out = self
            .veem
            .consoles
            .attach(role, vee_id, force, input)
            .await
            .map_err(|e| self.refusal(role, e))?;
        let redactor = self.redactor(role);
        Ok(Box::pin(out.map(move |o| match o {
            Ok(ConsoleOutput::Data(data)) => Ok(AttachConsoleResponse {
                data,
                notice: String::new(),
            }),
            Ok(ConsoleOutput::Notice(n)) => Ok(AttachConsoleResponse {
                data: vec![],
                notice: redactor.as_ref().map_or(n.clone(), |r| r.text(&n)),
            }),
            Err(s) => Err(s),
        })))
    }
}

/// Errors when a request's `data` is over [`MAX_INPUT`], naming the field.
fn check(r: &AttachConsoleRequest) -> Result<(), Status> {
    if r.data.len() > MAX_INPUT {
        return Err(Status::invalid_argument(format!(
            "field `data`: {} bytes, more than the {MAX_INPUT} one request may carry",
            r.data.len()
        )));
    }
    Ok(())
}
