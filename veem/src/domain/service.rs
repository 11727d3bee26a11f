//! A service's overall state, derived from its VEEs' states (never stored).

use super::VeeState;

/// What a service provider sees of a service as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceState {
    /// Every VEE that has not ended runs (instances scaled in or stopped
    /// are over, not missing).
    Running,
    /// Every VEE is terminated.
    Terminated,
    /// Anything else (some VEEs deploying, failed, suspended, ...).
    Partial,
}

impl ServiceState {
    /// The state of a service whose VEEs are in `states` (a service with no
    /// VEEs counts as running).
    pub fn of(states: impl IntoIterator<Item = VeeState> + Clone) -> Self {
        let mut live = states.clone().into_iter().filter(|s| *s != VeeState::Terminated).peekable();
        if live.peek().is_none() && states.into_iter().next().is_some() {
            ServiceState::Terminated
        } else if live.all(|s| s == VeeState::Running) {
            ServiceState::Running
        } else {
            ServiceState::Partial
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_from_the_vees() {
        use VeeState::*;
        assert_eq!(ServiceState::of([Running, Running]), ServiceState::Running);
        assert_eq!(ServiceState::of([Terminated, Terminated]), ServiceState::Terminated);
        assert_eq!(ServiceState::of([Running, Failed]), ServiceState::Partial);
        // A scaled-in (or stopped) instance is over, not missing.
        assert_eq!(ServiceState::of([Running, Terminated]), ServiceState::Running);
        assert_eq!(ServiceState::of([Deploying, Terminated]), ServiceState::Partial);
        assert_eq!(ServiceState::of(Vec::<VeeState>::new()), ServiceState::Running);
    }
}
