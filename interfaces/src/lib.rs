//! Shared interfaces of the VEE manager: the VMI and VHI gRPC definitions,
//! the service manifest and SLA types, the image repository client and the
//! shared error type. No daemon code lives here (DESIGN.md §2).

pub mod blob_id;
pub mod database;
pub mod error;
pub mod manifest;
pub mod repo_client;
pub mod retry;

/// VHI: the VEE host interface (`proto/vhi.proto`).
pub mod vhi {
    tonic::include_proto!("vhi.v1");
}

/// VMI: the VEE management interface (`proto/vmi.proto`).
pub mod vmi {
    tonic::include_proto!("vmi.v1");
}

pub use blob_id::BlobId;
pub use error::{Error, Result};
