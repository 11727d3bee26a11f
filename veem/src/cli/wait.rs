//! `--wait`: following a long command until it is over, printing each
//! change and what it waits for, bounded by `--timeout` (exit 6 past it).
//! With `--output json` the progress goes to stderr, so that stdout holds
//! one JSON document.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::bail;
use interfaces::vmi;

use super::client::VmiServiceClient;
use super::commands::print;
use super::{exit, output, OutputFormat, TimedOut};
use crate::api::model::{Migration, Service};

/// Migration states after which nothing more happens.
pub fn is_terminal(state: vmi::MigrationState) -> bool {
    use vmi::MigrationState::*;
    matches!(state, Done | Failed | Rejected)
}

/// Migration states in which the detail says something (what is copied,
/// why it failed or was rejected).
fn detail_matters(state: vmi::MigrationState) -> bool {
    use vmi::MigrationState::*;
    matches!(state, Running | Failed | Rejected)
}

/// One progress line of `--wait`: local time, migration ID, state and, while
/// running (or once failed), the detail; a proposal says that it waits for
/// an operator, and how one decides it.
pub fn progress_line(m: &vmi::MigrationInfo, now: chrono::DateTime<chrono::Utc>) -> String {
    let mut line = format!(
        "{} {}: {}",
        now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        m.migration_id,
        m.state()
    );
    if detail_matters(m.state()) && !m.detail.is_empty() {
        line += ": ";
        line += &m.detail;
    }
    if m.state() == vmi::MigrationState::Proposed {
        line += &format!(
            ": waiting for an operator to approve it (veem approve {id}, or veem reject {id} --reason TEXT)",
            id = m.migration_id
        );
    }
    line.push('\n');
    line
}

/// The closing line of `--wait` in table mode.
pub fn outcome_line(m: &vmi::MigrationInfo) -> String {
    match m.state() {
        vmi::MigrationState::Done => format!(
            "migration {} done: {} -> {} in {} ms (downtime {} ms)\n",
            m.migration_id,
            m.source,
            m.destination,
            interfaces::time::ms_of_duration(&m.total),
            interfaces::time::ms_of_duration(&m.downtime)
        ),
        state => {
            let detail = if m.detail.is_empty() {
                String::new()
            } else {
                format!(": {}", m.detail)
            };
            format!("migration {} {state}{detail}\n", m.migration_id)
        }
    }
}

/// How many failed polls in a row `--wait` tolerates while the VEEM is
/// unreachable (e.g. restarting) before giving up.
const MAX_UNAVAILABLE_POLLS: u32 = 10;

/// Polls with `ask` every `poll` until `done` says it is over, tolerating
/// [`MAX_UNAVAILABLE_POLLS`] Unavailable answers in a row; errors with
/// [`TimedOut`] (saying what it waited for, from `what`) past `timeout`.
async fn poll_until<T, F, Fut>(
    poll: Duration,
    timeout: Option<Duration>,
    mut ask: F,
    mut on_answer: impl FnMut(&T) -> anyhow::Result<bool>,
    what: impl Fn() -> String,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let started = Instant::now();
    let mut unavailable = 0;
    loop {
        if let Some(t) = timeout.filter(|t| started.elapsed() >= *t) {
            return Err(TimedOut { after: t, what: what() }.into());
        }
        tokio::time::sleep(poll).await;
        match ask().await {
            Ok(answer) => {
                unavailable = 0;
                if on_answer(&answer)? {
                    return Ok(());
                }
            }
            Err(s) if s.code() == tonic::Code::Unavailable && unavailable < MAX_UNAVAILABLE_POLLS => unavailable += 1,
            Err(s) => return Err(s.into()),
        }
    }
}

/// Follows migration `first` until it is done, failed or rejected,
/// printing each change. Exit code 0 only for `done`.
pub async fn migration(
    c: &mut VmiServiceClient,
    first: vmi::MigrationInfo,
    timeout: Option<Duration>,
    fmt: OutputFormat,
    poll: Duration,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<u8> {
    let id = first.migration_id.clone();
    let current = std::cell::RefCell::new(first);
    let mut shown = (current.borrow().state, current.borrow().detail.clone());
    let json = matches!(fmt, OutputFormat::Json | OutputFormat::Ids);
    {
        let progress: &mut dyn Write = if json { &mut *err } else { &mut *out };
        print(progress, &progress_line(&current.borrow(), chrono::Utc::now()))?;
    }
    if !is_terminal(current.borrow().state()) {
        let client = c.clone();
        let ask = || {
            let c = client.clone();
            async move { super::pages::migrations(&c).await }
        };
        let on_answer = |list: &Vec<vmi::MigrationInfo>| -> anyhow::Result<bool> {
            let Some(m) = list.iter().find(|m| m.migration_id == id) else {
                bail!("migration {id} is no longer listed by the VEEM");
            };
            *current.borrow_mut() = m.clone();
            let changed = m.state != shown.0 || (detail_matters(m.state()) && m.detail != shown.1);
            if changed {
                shown = (m.state, m.detail.clone());
                let progress: &mut dyn Write = if json { &mut *err } else { &mut *out };
                print(progress, &progress_line(m, chrono::Utc::now()))?;
            }
            Ok(is_terminal(m.state()))
        };
        let what = || {
            let m = current.borrow();
            let hint = if m.state() == vmi::MigrationState::Proposed {
                ": no operator approved it"
            } else {
                ""
            };
            format!("waiting for migration {id} ({}{hint})", m.state())
        };
        poll_until(poll, timeout, ask, on_answer, what).await?;
    }
    let m = current.into_inner();
    match fmt {
        OutputFormat::Json | OutputFormat::Yaml | OutputFormat::Ids => print(out, &output::migration(&Migration::from(&m), fmt))?,
        OutputFormat::Table | OutputFormat::Wide => print(out, &outcome_line(&m))?,
    }
    Ok(if m.state() == vmi::MigrationState::Done {
        exit::OK
    } else {
        exit::ERROR
    })
}

/// Follows rollout `first` until it is done or failed, printing each
/// instance replaced; then the rollout. Exit code 0 only for `done`.
#[allow(clippy::too_many_arguments)]
pub async fn rollout(
    c: &mut VmiServiceClient,
    first: vmi::Rollout,
    timeout: Option<Duration>,
    fmt: OutputFormat,
    poll: Duration,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<u8> {
    let json = matches!(fmt, OutputFormat::Json | OutputFormat::Ids);
    let line = |r: &vmi::Rollout| {
        format!(
            "{} {} {}: {} of {} replaced ({})\n",
            chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            r.component,
            r.state(),
            r.replaced.len(),
            r.instances,
            r.to_image
        )
    };
    let current = std::cell::RefCell::new(first);
    {
        let progress: &mut dyn Write = if json { &mut *err } else { &mut *out };
        print(progress, &line(&current.borrow()))?;
    }
    let rolling = |r: &vmi::Rollout| r.state() == vmi::RolloutState::Rolling;
    if rolling(&current.borrow()) {
        let (client, req) = (c.clone(), {
            let r = current.borrow();
            vmi::GetRolloutRequest {
                service_id: r.service_id.clone(),
                component: r.component.clone(),
            }
        });
        let ask = || {
            let (mut c, req) = (client.clone(), req.clone());
            async move { c.get_rollout(req).await.map(tonic::Response::into_inner) }
        };
        let on_answer = |r: &vmi::Rollout| -> anyhow::Result<bool> {
            let changed = (r.state, r.replaced.len()) != (current.borrow().state, current.borrow().replaced.len());
            *current.borrow_mut() = r.clone();
            if changed {
                let progress: &mut dyn Write = if json { &mut *err } else { &mut *out };
                print(progress, &line(r))?;
            }
            Ok(!rolling(r))
        };
        let what = || {
            let r = current.borrow();
            format!(
                "waiting for the rollout of {} ({} of {} replaced)",
                r.component,
                r.replaced.len(),
                r.instances
            )
        };
        poll_until(poll, timeout, ask, on_answer, what).await?;
    }
    let r = current.into_inner();
    print(out, &output::rollout(&crate::api::model::Rollout::from(&r), fmt))?;
    Ok(if r.state() == vmi::RolloutState::Done {
        exit::OK
    } else {
        exit::ERROR
    })
}

/// How many VEEs of a service are running, and which ended badly.
fn tally(vees: &[vmi::VeeInfo]) -> (usize, Vec<String>) {
    use vmi::VeeState::*;
    let running = vees.iter().filter(|v| v.state() == Running).count();
    let failed = vees
        .iter()
        .filter(|v| matches!(v.state(), Failed | Rejected | Stopped | Terminated))
        .map(|v| format!("{} {}", v.vee_id, v.state().as_str_name().to_lowercase()))
        .collect();
    (running, failed)
}

/// Follows service `service_id` until every VEE runs (exit 0), or one
/// fails (exit 1), printing the count of running VEEs as it changes; then
/// prints the service. With `live_only` (after a scale), VEEs that ended
/// (terminated: scaled in, stopped before) are not waited for.
#[allow(clippy::too_many_arguments)]
pub async fn service_running(
    c: &mut VmiServiceClient,
    service_id: &str,
    live_only: bool,
    timeout: Option<Duration>,
    fmt: OutputFormat,
    poll: Duration,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<u8> {
    let json = matches!(fmt, OutputFormat::Json | OutputFormat::Ids);
    let mut last = None;
    let failed = std::cell::RefCell::new(Vec::new());
    let state = std::cell::Cell::new((0, 0));
    let client = c.clone();
    let sid = service_id.to_string();
    let ask = || {
        let (c, service_id) = (client.clone(), sid.clone());
        async move { super::pages::vees(&c, &service_id).await }
    };
    let on_answer = |all: &Vec<vmi::VeeInfo>| -> anyhow::Result<bool> {
        let vees: Vec<vmi::VeeInfo> = all
            .iter()
            .filter(|v| !live_only || v.state() != vmi::VeeState::Terminated)
            .cloned()
            .collect();
        let (running, bad) = tally(&vees);
        state.set((running, vees.len()));
        if last != Some(running) {
            last = Some(running);
            let progress: &mut dyn Write = if json { &mut *err } else { &mut *out };
            let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            print(progress, &format!("{now} service {sid}: {running}/{} VEEs running\n", vees.len()))?;
        }
        let over = !bad.is_empty() || (running == vees.len() && running > 0);
        *failed.borrow_mut() = bad;
        Ok(over)
    };
    let what = || {
        let (running, all) = state.get();
        format!("waiting for the VEEs of service {service_id} to run ({running}/{all} running)")
    };
    poll_until(poll, timeout, ask, on_answer, what).await?;
    let s = c
        .get_service(vmi::GetServiceRequest {
            service_id: service_id.into(),
        })
        .await?
        .into_inner();
    print(out, &output::service(&Service::from(&s), fmt))?;
    let failed = failed.into_inner();
    if failed.is_empty() {
        return Ok(exit::OK);
    }
    let _ = writeln!(err, "error: service {service_id}: {}", failed.join(", "));
    Ok(exit::ERROR)
}
