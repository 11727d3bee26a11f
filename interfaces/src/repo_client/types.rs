//! Metadata types of the image repository and the validation rules that the
//! client and the server share (names, pins, labels, formats).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::blob_id::BlobId;

/// What a blob holds. Serialized in kebab-case (`checkpoint-memory`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BlobKind {
    /// A root or data disk image of a VEE.
    Disk,
    /// A kernel for direct kernel boot.
    Kernel,
    /// An initial ramdisk for direct kernel boot.
    Initrd,
    /// The memory state of a checkpointed VEE.
    CheckpointMemory,
    /// The disk overlay of a checkpointed VEE.
    CheckpointDisk,
    /// Content pushed through the OCI API (`/v2`), described by the
    /// manifests that reference it.
    OciBlob,
    /// An OCI manifest or index pushed through the OCI API.
    Manifest,
    /// A chunk of a checkpoint's memory state or disk overlay
    /// (`crate::chunks`), kept while a kept chunk index lists it.
    CheckpointChunk,
    /// A checkpoint part as the list of its chunks (`crate::chunks`),
    /// accepted only when every chunk it lists is stored.
    CheckpointIndex,
}

impl BlobKind {
    /// All kinds, in declaration order.
    pub const ALL: [BlobKind; 9] = [
        BlobKind::Disk,
        BlobKind::Kernel,
        BlobKind::Initrd,
        BlobKind::CheckpointMemory,
        BlobKind::CheckpointDisk,
        BlobKind::OciBlob,
        BlobKind::Manifest,
        BlobKind::CheckpointChunk,
        BlobKind::CheckpointIndex,
    ];

    /// The kebab-case name used on the wire and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            BlobKind::Disk => "disk",
            BlobKind::Kernel => "kernel",
            BlobKind::Initrd => "initrd",
            BlobKind::CheckpointMemory => "checkpoint-memory",
            BlobKind::CheckpointDisk => "checkpoint-disk",
            BlobKind::OciBlob => "oci-blob",
            BlobKind::Manifest => "manifest",
            BlobKind::CheckpointChunk => "checkpoint-chunk",
            BlobKind::CheckpointIndex => "checkpoint-index",
        }
    }
}

impl fmt::Display for BlobKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BlobKind {
    type Err = String;

    /// Errors: a message listing the accepted kinds.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BlobKind::ALL.into_iter().find(|k| k.as_str() == s).ok_or_else(|| {
            let names: Vec<_> = BlobKind::ALL.iter().map(|k| k.as_str()).collect();
            format!("unknown kind {s:?}; expected one of {}", names.join(", "))
        })
    }
}

/// Image formats the repository records (`format` of a blob).
pub const FORMATS: [&str; 2] = ["qcow2", "raw"];

/// What the pusher declares about a blob besides its content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushMeta {
    /// Human-readable name, e.g. `debian-12-amd64.qcow2` (see [`validate_name`]).
    pub name: String,
    /// What the blob holds.
    pub kind: BlobKind,
    /// Image format, one of [`FORMATS`]; `None` for blobs that are not disk images.
    pub format: Option<String>,
    /// Free-form labels such as `os=debian`, `arch=x86_64` (see [`validate_label`]).
    pub labels: BTreeMap<String, String>,
}

impl PushMeta {
    /// Metadata with a name and kind, no format and no labels.
    pub fn new(name: impl Into<String>, kind: BlobKind) -> Self {
        Self {
            name: name.into(),
            kind,
            format: None,
            labels: BTreeMap::new(),
        }
    }

    /// Checks every field. Errors: `(field, reason)` of the first bad field,
    /// e.g. `("name", "must not contain '/'")`.
    pub fn validate(&self) -> Result<(), (String, String)> {
        validate_name(&self.name).map_err(|r| ("name".to_string(), r))?;
        if let Some(format) = &self.format {
            validate_format(format).map_err(|r| ("format".to_string(), r))?;
        }
        if self.labels.len() > MAX_LABELS {
            return Err(("labels".into(), format!("at most {MAX_LABELS} labels")));
        }
        for (k, v) in &self.labels {
            validate_label(k, v).map_err(|r| (format!("label.{k}"), r))?;
        }
        Ok(())
    }
}

/// What the repository records about a stored blob.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobMeta {
    /// Content ID: sha256 of the content.
    pub id: BlobId,
    /// Name given by the first push of this content.
    pub name: String,
    /// What the blob holds.
    pub kind: BlobKind,
    /// Image format (`qcow2`, `raw`) or `None`.
    pub format: Option<String>,
    /// Size of the content in bytes.
    pub size: u64,
    /// When the content was first stored (RFC 3339 on the wire).
    pub created: DateTime<Utc>,
    /// Labels given by the first push of this content.
    pub labels: BTreeMap<String, String>,
    /// Names of the pins that keep the blob from being deleted without force,
    /// sorted (e.g. `checkpoint-42`, `site-b`).
    pub pins: Vec<String>,
    /// The caller that pushed the content first (a provider, a site or
    /// `operator`); records from before owners were kept belong to the
    /// operator.
    #[serde(default = "operator_name")]
    pub owner: String,
    /// Readable by every authenticated caller (set by the operator).
    #[serde(default)]
    pub public: bool,
    /// Other callers that may read the blob (shared with them, or they
    /// pushed the same content), sorted. Shown only to the owner and the
    /// operator.
    #[serde(default)]
    pub readers: Vec<String>,
}

/// The name the operator's token has in the repository.
pub const OPERATOR: &str = "operator";

fn operator_name() -> String {
    OPERATOR.to_string()
}

/// Longest accepted blob name, in bytes.
pub const MAX_NAME_LEN: usize = 255;
/// Longest accepted pin name, in bytes.
pub const MAX_PIN_LEN: usize = 128;
/// Most labels on one blob.
pub const MAX_LABELS: usize = 64;
/// Longest accepted label key, in bytes.
pub const MAX_LABEL_KEY_LEN: usize = 64;
/// Longest accepted label value, in bytes.
pub const MAX_LABEL_VALUE_LEN: usize = 255;

/// Most pins on one blob a repository may be configured to allow (its
/// `max_pins_per_blob`, 64 by default).
pub const MAX_PINS: usize = 1024;
/// Most readers of one blob.
pub const MAX_READERS: usize = 1024;

/// Whether `c` may not appear in a name or label shown to people: a
/// control character (Unicode Cc), a line or paragraph separator, or an
/// invisible format character (Cf) — the bidirectional controls of
/// Unicode TR #9 (U+061C, U+200E-F, U+202A-E, U+2066-9) that make a name
/// read otherwise than it is (CVE-2021-42574, "Trojan Source"), the zero
/// widths, joiners and word joiner (U+200B-D, U+2060-4), the soft hyphen,
/// the byte order mark, and the tag characters (U+E0000-7F).
pub fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{061C}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{206F}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{E0000}'..='\u{E007F}'
        )
}

/// Checks a blob name: 1 to [`MAX_NAME_LEN`] bytes, no `/` or `\`, no `..`,
/// no control, bidirectional or invisible character ([`is_hidden`]).
/// Errors: the reason.
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!("longer than {MAX_NAME_LEN} bytes"));
    }
    if name.contains('/') || name.contains('\\') {
        return Err("must not contain '/' or '\\'".into());
    }
    if name.contains("..") {
        return Err("must not contain '..'".into());
    }
    if let Some(c) = name.chars().find(|c| is_hidden(*c)) {
        return Err(format!(
            "must not contain control, bidirectional or invisible characters (found U+{:04X})",
            c as u32
        ));
    }
    Ok(())
}

/// Checks a pin name: 1 to [`MAX_PIN_LEN`] bytes of ASCII letters, digits and
/// `.`, `_`, `-`, `:`, `@`, not containing `..`. Errors: the reason.
pub fn validate_pin(pin: &str) -> Result<(), String> {
    if pin.is_empty() {
        return Err("must not be empty".into());
    }
    if pin.len() > MAX_PIN_LEN {
        return Err(format!("longer than {MAX_PIN_LEN} bytes"));
    }
    if pin.contains("..") {
        return Err("must not contain '..'".into());
    }
    if let Some(c) = pin.chars().find(|c| !(c.is_ascii_alphanumeric() || "._-:@".contains(*c))) {
        return Err(format!("character {c:?} not allowed (letters, digits, '.', '_', '-', ':', '@')"));
    }
    Ok(())
}

/// Checks a label: key of 1 to [`MAX_LABEL_KEY_LEN`] bytes of lowercase ASCII
/// letters, digits, `.`, `_`, `-`; value of at most [`MAX_LABEL_VALUE_LEN`]
/// bytes without control characters. Errors: the reason.
pub fn validate_label(key: &str, value: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_LABEL_KEY_LEN {
        return Err(format!("key must be 1 to {MAX_LABEL_KEY_LEN} bytes"));
    }
    if !key
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
    {
        return Err("key may hold only lowercase letters, digits, '.', '_', '-'".into());
    }
    if value.len() > MAX_LABEL_VALUE_LEN {
        return Err(format!("value longer than {MAX_LABEL_VALUE_LEN} bytes"));
    }
    if let Some(c) = value.chars().find(|c| is_hidden(*c)) {
        return Err(format!(
            "value must not contain control, bidirectional or invisible characters (found U+{:04X})",
            c as u32
        ));
    }
    Ok(())
}

/// Checks an image format against [`FORMATS`]. Errors: the reason.
pub fn validate_format(format: &str) -> Result<(), String> {
    if FORMATS.contains(&format) {
        Ok(())
    } else {
        Err(format!("unknown format {format:?}; expected one of {}", FORMATS.join(", ")))
    }
}

/// Parses `key=value` (as given to `--label`). Errors: the reason.
pub fn parse_label(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("label {s:?} is not key=value"))?;
    validate_label(k, v).map_err(|r| format!("label {s:?}: {r}"))?;
    Ok((k.to_string(), v.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_round_trips_in_kebab_case() {
        for k in BlobKind::ALL {
            assert_eq!(k.as_str().parse::<BlobKind>().unwrap(), k);
            assert_eq!(serde_json::to_string(&k).unwrap(), format!("\"{}\"", k.as_str()));
        }
        assert!("vmstate".parse::<BlobKind>().unwrap_err().contains("checkpoint-memory"));
    }

    #[test]
    fn names_with_slash_or_dotdot_are_rejected() {
        assert!(validate_name("debian-12.qcow2").is_ok());
        for bad in [
            "",
            "a/b",
            "../x",
            "a..b",
            "..",
            "a\\b",
            "a\nb",
            "evil\u{202E}2cwoq.exe",
            "a\u{200B}b",
            "\u{FEFF}x",
            "a\u{2066}b",
        ] {
            assert!(validate_name(bad).is_err(), "{bad:?} accepted");
        }
        assert!(validate_name(&"x".repeat(256)).is_err());
    }

    #[test]
    fn pins_and_labels_are_checked() {
        assert!(validate_pin("checkpoint:42@site-a").is_ok());
        for bad in ["", "a/b", "..", "a b"] {
            assert!(validate_pin(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(parse_label("os=debian").unwrap(), ("os".into(), "debian".into()));
        assert!(parse_label("os").is_err());
        assert!(parse_label("OS=x").is_err());
        let mut meta = PushMeta::new("x", BlobKind::Disk);
        meta.format = Some("vmdk".into());
        assert_eq!(meta.validate().unwrap_err().0, "format");
    }
}
