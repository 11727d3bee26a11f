//! Shared interfaces of the VEE manager: the VMI and VHI gRPC definitions,
//! the service manifest and SLA types, the image repository client and the
//! shared error type. No daemon code lives here (DESIGN.md §2).

pub mod artifact;
pub mod auth_throttle;
pub mod chunks;
pub mod cloud_init;
pub mod config;
pub mod connections;
pub mod daemon;
pub mod database;
pub mod error;
pub mod fencing;
pub mod listen;
pub mod locks;
pub mod metrics;
pub mod output;
pub mod pages;
pub mod registry;
pub mod repo_client;
pub mod retry;
pub mod time;
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

    impl From<crate::manifest::GuaranteeLevel> for GuaranteeLevel {
        fn from(g: crate::manifest::GuaranteeLevel) -> Self {
            use crate::manifest::GuaranteeLevel as M;
            match g {
                M::Background => Self::Background,
                M::Legacy => Self::Legacy,
                M::Standard => Self::Standard,
                M::Enhanced => Self::Enhanced,
                M::Full => Self::Full,
            }
        }
    }

    impl GuaranteeLevel {
        /// The manifest's level of a VMI `GuaranteeLevel` (an `i32`
        /// field); `None` when unset or unknown.
        pub fn of_wire(value: i32) -> Option<crate::manifest::GuaranteeLevel> {
            crate::manifest::GuaranteeLevel::ALL
                .into_iter()
                .find(|g| Self::from(*g) as i32 == value)
        }
    }
    /// The encoded descriptors of `vmi.proto` and what it imports, for
    /// server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("vmi_descriptor");
}

/// The format of a checkpoint record (`vhi.CheckpointRecord`) this version
/// writes. 0: before the field existed (same meaning as 1); 1: the field,
/// times in Unix milliseconds (`taken_at_unix_ms`, `downtime_ms`); 2:
/// `take_time` and `downtime` as protobuf Timestamp and Duration; 3:
/// `layout` (parts whole or chunked), `save_format` and `bytes_sent`, unset
/// in older records (whole, sequential).
pub const CHECKPOINT_RECORD_FORMAT: u32 = 3;

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

    /// Brings a record of format 0, 1 or 2 to this version's: its times
    /// move from the millisecond fields into `take_time` and `downtime`,
    /// its parts are whole and its memory state sequential. A record of
    /// this format is left as it is.
    #[allow(deprecated)] // the fields of formats 0 and 1 are read here only
    pub fn upgrade(&mut self) {
        if self.format_version < 3 {
            self.take_time = self.take_time.or(time::timestamp_ms(self.taken_at_unix_ms));
            self.downtime = self.downtime.or(time::duration_ms(self.downtime_ms));
            self.taken_at_unix_ms = 0;
            self.downtime_ms = 0;
            if self.layout == vhi::CheckpointLayout::Unspecified as i32 {
                self.layout = vhi::CheckpointLayout::Whole as i32;
            }
            if self.save_format == vhi::SaveFormat::Unspecified as i32 {
                self.save_format = vhi::SaveFormat::Sequential as i32;
            }
            self.format_version = CHECKPOINT_RECORD_FORMAT;
        }
    }
}

impl vhi::CompatibilityProfile {
    /// Whether a host of this profile reads memory states in `format`: a
    /// sequential one (or one from before formats) everywhere, another
    /// only where `save_formats` lists it (a host that lists none is of an
    /// older version, sequential only).
    pub fn reads(&self, format: vhi::SaveFormat) -> bool {
        matches!(format, vhi::SaveFormat::Unspecified | vhi::SaveFormat::Sequential)
            || self.save_formats.contains(&(format as i32))
    }
}

pub use error::{Error, Result};
/// The service manifest and its validation (crate `vee-manifest`).
pub use vee_manifest as manifest;
pub use vee_manifest::{blob_id, excerpt, BlobId};
