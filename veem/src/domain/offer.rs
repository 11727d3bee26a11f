//! A site's answer to a service manifest before anything is reserved:
//! Negotiate's reply, and the words of a Deploy the site refuses (H §3.4:
//! accept, counter-offer with the earliest window it can keep, or reject,
//! each with its reasons).

use std::fmt;

/// Accept, counter-offer or reject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Accept,
    /// Feasible later: the offer's window.
    CounterOffer,
    Reject,
}

impl Verdict {
    /// `accept`, `counter-offer`, `reject`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Accept => "accept",
            Verdict::CounterOffer => "counter-offer",
            Verdict::Reject => "reject",
        }
    }
}

impl fmt::Display for Verdict {
    /// `accept`, `counter-offer`, `reject`: as the VMI shows them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The answer: its verdict, the reasons, and the service window the site
/// can keep (Unix seconds, start and end; for an acceptance and a
/// counter-offer).
#[derive(Clone, Debug, PartialEq)]
pub struct Offer {
    pub verdict: Verdict,
    pub reasons: Vec<String>,
    pub window: Option<(i64, i64)>,
}

impl Offer {
    /// A rejection for `reasons`.
    pub fn reject(reasons: Vec<String>) -> Self {
        Self {
            verdict: Verdict::Reject,
            reasons,
            window: None,
        }
    }
}
