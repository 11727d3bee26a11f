//! The store keys of the planner's entries (`planner` tree): the change
//! log names entries by these keys, and `persisted` writes them under them.

/// The key of a VEE's reservation (`spare`: of the spare protecting it).
pub(super) fn reservation_key(vee: &str, spare: bool) -> String {
    format!("{}/{vee}", if spare { "s" } else { "p" })
}

/// The key of the spare a peer site holds for a VEE.
pub(super) fn peer_spare_key(vee: &str) -> String {
    format!("x/{vee}")
}

/// The key of a service.
pub(super) fn service_key(id: &str) -> String {
    format!("v/{id}")
}
