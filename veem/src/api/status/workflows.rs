//! The workflows' and steps' errors, each coded by its variant (see the
//! parent module).

use tonic::Code;

use super::Coded;
use crate::ports::call::{CallError, Failure};
use crate::steps::abroad::AbroadError;
use crate::steps::boot::BootError;
use crate::steps::checkpoints::CheckpointError;
use crate::steps::networks::NetworkUpdateError;
use crate::steps::spares::SpareError;
use crate::steps::stop::StopError;
use crate::steps::windows::WindowError;
use crate::workflows::consoles::ConsoleError;
use crate::workflows::deploy::DeployError;
use crate::workflows::federation::IncomingError;
use crate::workflows::lifecycle::ActionError;
use crate::workflows::migration::{MigrationError, WithdrawError};
use crate::workflows::peer_epochs::EpochError;
use crate::workflows::resizing::ResizeError;
use crate::workflows::rollout::UpdateError;
use crate::workflows::scaling::ScaleError;

/// A host's or peer's failure, as this VEEM answers when it could not
/// do what was asked because of it: the other party unreachable or unable
/// to act now is Unavailable (another moment), its own failure Internal,
/// any refusal of it a refusal.
pub(super) fn code_of_call(c: &CallError) -> Code {
    match c.failure {
        Failure::Unreachable | Failure::NotActing => Code::Unavailable,
        Failure::Failed => Code::Internal,
        Failure::NotFound | Failure::Refused | Failure::Invalid | Failure::Exists | Failure::Unsupported | Failure::Denied | Failure::Busy => {
            Code::FailedPrecondition
        }
    }
}

impl Coded for ResizeError {
    fn code(&self) -> Code {
        match self {
            ResizeError::Field { .. } => Code::InvalidArgument,
            ResizeError::Record(r) => r.code(),
            ResizeError::Abroad { .. } | ResizeError::NotRunning { .. } | ResizeError::NoRoom { .. } => Code::FailedPrecondition,
            ResizeError::Host { call, .. } => code_of_call(call),
            ResizeError::Store(s) => s.code(),
        }
    }

    fn read_only(&self) -> bool {
        match self {
            ResizeError::Record(r) => r.read_only(),
            ResizeError::Store(s) => s.read_only(),
            _ => false,
        }
    }
}

impl Coded for WindowError {
    fn code(&self) -> Code {
        match self {
            WindowError::Record(r) => r.code(),
            WindowError::NothingLive { .. } | WindowError::NoRoom { .. } => Code::FailedPrecondition,
        }
    }

    fn read_only(&self) -> bool {
        matches!(self, WindowError::Record(r) if r.read_only())
    }
}

impl Coded for DeployError {
    fn code(&self) -> Code {
        match self {
            DeployError::Request(r) => r.code(),
            DeployError::Rejected { .. } | DeployError::Networks(_) | DeployError::Transition(_) => Code::FailedPrecondition,
            // The site's plan changed under every attempt: a conflict, to
            // be retried by the caller.
            DeployError::Contended { .. } => Code::Aborted,
            DeployError::Store(s) => s.code(),
        }
    }

    fn read_only(&self) -> bool {
        matches!(self, DeployError::Store(s) if s.read_only())
    }
}

impl Coded for ScaleError {
    fn code(&self) -> Code {
        match self {
            ScaleError::Request(r) => r.code(),
            ScaleError::Record(r) => r.code(),
            ScaleError::Rolling { .. }
            | ScaleError::Rejected(_)
            | ScaleError::Networks(_)
            | ScaleError::Transition(_)
            | ScaleError::NotStopped { .. } => Code::FailedPrecondition,
            ScaleError::Contended { .. } => Code::Aborted,
            ScaleError::Store(s) => s.code(),
        }
    }

    fn read_only(&self) -> bool {
        match self {
            ScaleError::Record(r) => r.read_only(),
            ScaleError::Store(s) => s.read_only(),
            _ => false,
        }
    }
}

impl Coded for UpdateError {
    fn code(&self) -> Code {
        match self {
            UpdateError::Request(r) => r.code(),
            UpdateError::Record(r) => r.code(),
            UpdateError::Rolling { .. } | UpdateError::NotHere { .. } => Code::FailedPrecondition,
            UpdateError::Store(s) => s.code(),
        }
    }

    fn read_only(&self) -> bool {
        match self {
            UpdateError::Record(r) => r.read_only(),
            UpdateError::Store(s) => s.read_only(),
            _ => false,
        }
    }
}

impl Coded for CheckpointError {
    fn code(&self) -> Code {
        match self {
            CheckpointError::NotFound { .. } => Code::NotFound,
            CheckpointError::NotOfVee { .. } => Code::InvalidArgument,
            CheckpointError::Awaited { .. } | CheckpointError::None { .. } | CheckpointError::Unreadable { .. } => Code::FailedPrecondition,
            CheckpointError::Store(s) => s.code(),
        }
    }

    fn read_only(&self) -> bool {
        matches!(self, CheckpointError::Store(s) if s.read_only())
    }
}

impl Coded for AbroadError {
    fn code(&self) -> Code {
        match self {
            AbroadError::Peer { call, .. } => code_of_call(call),
            AbroadError::Record(r) => r.code(),
        }
    }

    fn read_only(&self) -> bool {
        matches!(self, AbroadError::Record(r) if r.read_only())
    }
}

impl Coded for StopError {
    fn code(&self) -> Code {
        match self {
            StopError::Record(r) => r.code(),
            StopError::Host { call, .. } => code_of_call(call),
            StopError::Abroad(a) => a.code(),
            StopError::Store(s) => s.code(),
        }
    }

    fn read_only(&self) -> bool {
        match self {
            StopError::Record(r) => r.read_only(),
            StopError::Abroad(a) => a.read_only(),
            StopError::Store(s) => s.read_only(),
            StopError::Host { .. } => false,
        }
    }
}

impl Coded for WithdrawError {
    fn code(&self) -> Code {
        match self {
            WithdrawError::Record(r) => r.code(),
            WithdrawError::NotForPeer { .. } => Code::FailedPrecondition,
            WithdrawError::Primary { call, .. } => code_of_call(call),
        }
    }

    fn read_only(&self) -> bool {
        matches!(self, WithdrawError::Record(r) if r.read_only())
    }
}

impl Coded for ActionError {
    fn code(&self) -> Code {
        match self {
            ActionError::Record(r) => r.code(),
            ActionError::NotHere { .. } | ActionError::NotRunning { .. } | ActionError::NotStopped { .. } => Code::FailedPrecondition,
            ActionError::Host { call, .. } => code_of_call(call),
            ActionError::Checkpoint(c) => c.code(),
            ActionError::Abroad(a) => a.code(),
            ActionError::Stop(s) => s.code(),
            ActionError::Withdraw(w) => w.code(),
        }
    }

    fn read_only(&self) -> bool {
        match self {
            ActionError::Record(r) => r.read_only(),
            ActionError::Checkpoint(c) => c.read_only(),
            ActionError::Abroad(a) => a.read_only(),
            ActionError::Stop(s) => s.read_only(),
            ActionError::Withdraw(w) => w.read_only(),
            ActionError::NotHere { .. } | ActionError::NotRunning { .. } | ActionError::Host { .. } | ActionError::NotStopped { .. } => false,
        }
    }
}

impl Coded for SpareError {
    fn code(&self) -> Code {
        match self {
            SpareError::Request(r) => r.code(),
            SpareError::Agreement(_) | SpareError::Held { .. } | SpareError::NoRoom { .. } => Code::FailedPrecondition,
            SpareError::Store(s) => s.code(),
        }
    }

    fn read_only(&self) -> bool {
        matches!(self, SpareError::Store(s) if s.read_only())
    }
}

impl Coded for EpochError {
    fn code(&self) -> Code {
        match self {
            EpochError::Fenced(_) => Code::FailedPrecondition,
            EpochError::Contended { .. } => Code::Aborted,
            EpochError::Store(s) => s.code(),
        }
    }

    fn read_only(&self) -> bool {
        matches!(self, EpochError::Store(s) if s.read_only())
    }
}

impl Coded for BootError {
    fn code(&self) -> Code {
        match self {
            BootError::Record(r) => r.code(),
            BootError::NoHost { .. } => Code::FailedPrecondition,
            BootError::Host { call, .. } => code_of_call(call),
        }
    }

    fn read_only(&self) -> bool {
        matches!(self, BootError::Record(r) if r.read_only())
    }
}

impl Coded for IncomingError {
    fn code(&self) -> Code {
        match self {
            IncomingError::Request(r) => r.code(),
            IncomingError::Record(r) => r.code(),
            IncomingError::Agreement(_)
            | IncomingError::NoOverlay { .. }
            | IncomingError::AlreadyHere { .. }
            | IncomingError::NoRoom { .. }
            | IncomingError::NotRunning { .. }
            | IncomingError::NoHost { .. } => Code::FailedPrecondition,
            IncomingError::Host { call, .. } => code_of_call(call),
            IncomingError::Boot(b) => b.code(),
        }
    }

    fn read_only(&self) -> bool {
        match self {
            IncomingError::Record(r) => r.read_only(),
            IncomingError::Boot(b) => b.read_only(),
            _ => false,
        }
    }
}

impl Coded for MigrationError {
    fn code(&self) -> Code {
        match self {
            MigrationError::Request(r) => r.code(),
            MigrationError::Record(r) => r.code(),
            MigrationError::Refused(_) | MigrationError::Transition(_) => Code::FailedPrecondition,
            MigrationError::Store(s) => s.code(),
        }
    }

    fn read_only(&self) -> bool {
        match self {
            MigrationError::Record(r) => r.read_only(),
            MigrationError::Store(s) => s.read_only(),
            _ => false,
        }
    }
}

impl Coded for ConsoleError {
    fn code(&self) -> Code {
        match self {
            ConsoleError::Record(r) => r.code(),
            ConsoleError::Request(r) => r.code(),
            ConsoleError::NotRunning { .. } | ConsoleError::Held { .. } => Code::FailedPrecondition,
            ConsoleError::Unreached { call, .. } => code_of_call(call),
        }
    }

    fn read_only(&self) -> bool {
        matches!(self, ConsoleError::Record(r) if r.read_only())
    }
}

impl Coded for NetworkUpdateError {
    fn code(&self) -> Code {
        match self {
            NetworkUpdateError::Request(r) => r.code(),
            NetworkUpdateError::NoOverlay { .. } => Code::FailedPrecondition,
            NetworkUpdateError::Record(r) => r.code(),
        }
    }

    fn read_only(&self) -> bool {
        matches!(self, NetworkUpdateError::Record(r) if r.read_only())
    }
}
