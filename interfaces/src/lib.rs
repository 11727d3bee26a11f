//! Shared interfaces of the VEE manager: the VMI and VHI gRPC definitions,
//! the service manifest and SLA types, the image repository client and the
//! shared error type. No daemon code lives here (DESIGN.md §2).

pub mod blob_id;
pub mod cloud_init;
pub mod config;
pub mod daemon;
pub mod database;
pub mod error;
pub mod listen;
pub mod locks;
pub mod manifest;
pub mod repo_client;
pub mod retry;
pub mod tls;
pub mod tokens;

/// VHI: the VEE host interface (`proto/vhi/v1/vhi.proto`).
pub mod vhi {
    tonic::include_proto!("vhi.v1");
    /// The encoded descriptors of `vhi.proto`, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("vhi_descriptor");
}

/// VMI: the VEE management interface (`proto/vmi/v1/vmi.proto`).
pub mod vmi {
    tonic::include_proto!("vmi.v1");
    /// The encoded descriptors of `vmi.proto` and what it imports, for
    /// server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("vmi_descriptor");
}

/// The format of a checkpoint record (`vhi.CheckpointRecord`) this version
/// writes. 0: before the field existed (same meaning); 1: the field.
pub const CHECKPOINT_RECORD_FORMAT: u32 = 1;

impl vhi::CheckpointRecord {
    /// Errors with [`Error::FormatTooNew`] for a record written by a newer
    /// version.
    pub fn check_format(&self) -> Result<()> {
        Error::check_format(
            format!("checkpoint record {}", self.checkpoint_id),
            self.format_version,
            CHECKPOINT_RECORD_FORMAT,
        )
        .map(|_| ())
    }
}

pub use blob_id::BlobId;
pub use error::{Error, Result};
