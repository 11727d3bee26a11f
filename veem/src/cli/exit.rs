//! Process exit codes of the `veem` command, and their table in
//! `veem --help` (and so in docs/cli-reference.md and the man page).

/// The command succeeded (negotiation: accepted).
pub const OK: u8 = 0;
/// A gRPC error, a connection failure, an unreadable file, or a
/// migration that ended in any state but `done`.
pub const ERROR: u8 = 1;
/// Bad command line (reported by clap).
pub const USAGE: u8 = 2;
/// Negotiation ended in a counter-offer.
pub const COUNTER_OFFER: u8 = 3;
/// Refused: negotiation or Deploy rejected the manifest, or the VEEM
/// refused the request (gRPC FailedPrecondition, PermissionDenied,
/// AlreadyExists, ResourceExhausted).
pub const REJECT: u8 = 4;
/// Invalid input: a manifest that does not parse or validate (checked
/// before anything is sent), or a field the VEEM found invalid (gRPC
/// InvalidArgument).
pub const INVALID: u8 = 5;
/// Timed out: `--wait` ran past `--timeout`, or a request past
/// `--request-timeout` (gRPC DeadlineExceeded).
pub const TIMEOUT: u8 = 6;

/// The exit code of a failed command's error.
pub fn of(e: &anyhow::Error) -> u8 {
    use tonic::Code::*;
    match e.chain().find_map(|c| c.downcast_ref::<tonic::Status>()).map(|s| s.code()) {
        Some(InvalidArgument) => INVALID,
        Some(FailedPrecondition | PermissionDenied | AlreadyExists | ResourceExhausted) => REJECT,
        Some(DeadlineExceeded) => TIMEOUT,
        _ if e.chain().any(|c| c.is::<super::TimedOut>()) => TIMEOUT,
        _ if e.chain().any(|c| {
            c.is::<interfaces::manifest::Error>() || matches!(c.downcast_ref::<interfaces::Error>(), Some(interfaces::Error::Manifest(_)))
        }) =>
        {
            INVALID
        }
        _ => ERROR,
    }
}

/// Every exit code and when the command exits with it, in the order
/// `veem --help` lists them.
pub const TABLE: [(u8, &str); 7] = [
    (OK, "success (negotiate: the manifest is accepted)"),
    (
        ERROR,
        "an error: a connection failure, an unreadable file, a gRPC error not listed below, or a migration or rollout waited for that ended otherwise than done",
    ),
    (USAGE, "a bad command line"),
    (COUNTER_OFFER, "negotiate: the VEEM makes a counter-offer"),
    (
        REJECT,
        "refused: negotiate or deploy rejected the manifest, or the VEEM refused the request (FailedPrecondition, PermissionDenied, AlreadyExists, ResourceExhausted)",
    ),
    (
        INVALID,
        "invalid input: a manifest that does not parse or validate (checked before anything is sent), or a field the VEEM found invalid (InvalidArgument)",
    ),
    (
        TIMEOUT,
        "timed out: --wait ran past --timeout, or a call past --request-timeout (DeadlineExceeded)",
    ),
];

/// The "Exit status" section of `veem --help`: [`TABLE`], one code a line.
pub fn help() -> String {
    let mut s = String::from("Exit status:\n");
    for (code, meaning) in TABLE {
        s.push_str(&format!("  {code}  {meaning}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every code the command can exit with is in the table once, and
    /// `veem --help` (from which docs/cli-reference.md is generated)
    /// lists each with its meaning.
    #[test]
    fn every_exit_code_is_listed_once_in_the_help() {
        let codes: Vec<u8> = TABLE.iter().map(|(c, _)| *c).collect();
        assert_eq!(codes, [OK, ERROR, USAGE, COUNTER_OFFER, REJECT, INVALID, TIMEOUT]);
        assert_eq!(
            codes.iter().collect::<std::collections::BTreeSet<_>>().len(),
            codes.len(),
            "each code once"
        );
        // What `of` maps errors to, and what clap exits with on a bad
        // command line, are in the table.
        let errors = [
            anyhow::Error::new(tonic::Status::invalid_argument("x")),
            anyhow::Error::new(tonic::Status::failed_precondition("x")),
            anyhow::Error::new(tonic::Status::deadline_exceeded("x")),
            anyhow::Error::new(tonic::Status::unavailable("x")),
            anyhow::anyhow!("x"),
        ];
        for e in &errors {
            assert!(codes.contains(&of(e)), "{e}: {}", of(e));
        }
        let usage = super::super::Cli::definition()
            .try_get_matches_from(["veem", "--no-such-flag"])
            .unwrap_err();
        assert_eq!(usage.exit_code(), i32::from(USAGE));
        let help = super::super::Cli::definition().render_long_help().to_string();
        for (code, meaning) in TABLE {
            assert!(
                help.contains(&format!("  {code}  {meaning}")),
                "veem --help lacks exit code {code}:\n{help}"
            );
        }
    }
}
