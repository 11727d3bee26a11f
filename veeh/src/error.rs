//! The VEEH's typed errors and their one mapping to gRPC status codes
//! ([`status`]). Operations return `anyhow::Error` chains whose typed links
//! decide the code; the message is always the whole chain, so users read
//! the field and the reason.

use std::time::Duration;

use tonic::Status;

/// What a VHI caller did that this host refuses or cannot find.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// A request field that is missing or malformed (InvalidArgument).
    #[error("field `{field}`: {reason}")]
    InvalidField { field: String, reason: String },
    /// This host has no record of the VEE (NotFound).
    #[error("VEE {0} is not on this host")]
    NotOnHost(String),
    /// This VEEH already runs a domain of the VEE (FailedPrecondition).
    #[error("VEE {vee_id} already has a domain on {host}")]
    AlreadyHere { vee_id: String, host: String },
    /// A checkpoint whose compatibility profile does not match this host
    /// (FailedPrecondition, H §4.4).
    #[error("checkpoint {checkpoint} cannot be restored on {host}: {why}")]
    Incompatible { checkpoint: String, host: String, why: String },
    /// The machine or the guest cannot take a live resize
    /// (FailedPrecondition).
    #[error("VEE {vee_id} cannot be resized: {why}")]
    CannotResize { vee_id: String, why: String },
    /// Another session holds the VEE's console and the caller did not
    /// ask to take it (FailedPrecondition).
    #[error("another session holds the console of VEE {0}: attach with force to take it")]
    ConsoleBusy(String),
}

impl HostError {
    /// [`HostError::InvalidField`] for `field`.
    pub fn field(field: impl Into<String>, reason: impl std::fmt::Display) -> Self {
        HostError::InvalidField {
            field: field.into(),
            reason: reason.to_string(),
        }
    }
}

/// The VEE has no domain owned by this VEEH at this libvirtd (none was
/// found, or it vanished while being used). The VHI answers `NotFound`.
#[derive(Debug, thiserror::Error)]
#[error("VEE {vee_id}: no domain {domain} owned by {owner} at {uri}")]
pub struct NoDomain {
    pub vee_id: String,
    pub domain: String,
    pub owner: String,
    pub uri: String,
}

/// Another VEEH's domain of this VEE is still at this host's libvirtd:
/// starting a second copy is refused (FailedPrecondition; the VEEM retries).
#[derive(Debug, thiserror::Error)]
#[error("VEE {vee_id}: the copy owned by {owner} is still at this libvirtd after {waited:?}; not starting a second one")]
pub struct ForeignCopy {
    pub vee_id: String,
    pub owner: String,
    pub waited: Duration,
}

/// An image this host refuses to use: it would make QEMU open a file of
/// the host (a backing or external data file) or is in a format it does
/// not take. The message says which and why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UnsafeImage(pub String);

/// The gRPC status of an error: decided by the first typed error in its
/// chain, `Internal` when there is none; the message is the whole chain.
pub fn status(e: anyhow::Error) -> Status {
    interfaces::error::grpc_status(&e, code_of, tonic::Code::Internal)
}

fn code_of(e: &(dyn std::error::Error + 'static)) -> Option<tonic::Code> {
    use tonic::Code;
    if let Some(h) = e.downcast_ref::<HostError>() {
        return Some(match h {
            HostError::InvalidField { .. } => Code::InvalidArgument,
            HostError::NotOnHost(_) => Code::NotFound,
            HostError::AlreadyHere { .. } | HostError::Incompatible { .. } | HostError::CannotResize { .. } | HostError::ConsoleBusy(_) => {
                Code::FailedPrecondition
            }
        });
    }
    if e.is::<UnsafeImage>() {
        return Some(Code::InvalidArgument);
    }
    if e.is::<NoDomain>() {
        return Some(Code::NotFound);
    }
    e.is::<ForeignCopy>().then_some(Code::FailedPrecondition)
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn each_error_maps_to_one_code_whatever_its_context() {
        use tonic::Code;
        let cases: Vec<(anyhow::Error, Code)> = vec![
            (HostError::field("vee_id", "is not a UUID").into(), Code::InvalidArgument),
            (
                anyhow::Error::from(HostError::NotOnHost("v".into())).context("restore"),
                Code::NotFound,
            ),
            (
                HostError::AlreadyHere {
                    vee_id: "v".into(),
                    host: "h".into(),
                }
                .into(),
                Code::FailedPrecondition,
            ),
            (
                HostError::Incompatible {
                    checkpoint: "c".into(),
                    host: "h".into(),
                    // A message that names a field is still no bad argument.
                    why: "compatibility profile field `accel`: checkpoint has \"kvm\"".into(),
                }
                .into(),
                Code::FailedPrecondition,
            ),
            (
                anyhow::Error::from(HostError::CannotResize {
                    vee_id: "v".into(),
                    why: "its balloon is at 256 MiB, not 192 MiB".into(),
                })
                .context("resize"),
                Code::FailedPrecondition,
            ),
            (
                Err::<(), _>(interfaces::Error::check_format("x", 9, 1).unwrap_err())
                    .context("restore")
                    .unwrap_err(),
                Code::FailedPrecondition,
            ),
            // Words in an untyped message decide nothing.
            (anyhow::anyhow!("already not found: field `x`"), Code::Internal),
        ];
        for (e, code) in cases {
            let msg = format!("{e:#}");
            let s = status(e);
            assert_eq!((s.code(), s.message()), (code, msg.as_str()));
        }
    }
}
