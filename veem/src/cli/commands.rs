//! The client subcommands: one VMI call each (plus polling for `--wait`),
//! printed through [`super::output`].

use std::io::Write;
use std::time::Duration;

use anyhow::bail;
use interfaces::vmi;

use super::client::{connect, read_manifest, VmiServiceClient};
use super::retries::{deploy_idempotent, leader_lost, read_only, LEADER_RETRIES};
use super::lookup::{or_lookup, Kind};
use super::{exit, output, pages, Cli, Command, OutputFormat};
use crate::api::model::{Event, Migration, Negotiation, Rollout, Service, SlaViolation, Usage, Vee};

/// Exit code for a Negotiate verdict: 0 accept, 3 counter-offer, 4 reject;
/// `None` for a verdict this CLI does not know.
pub fn verdict_exit_code(verdict: vmi::Verdict) -> Option<u8> {
    match verdict {
        vmi::Verdict::Accept => Some(exit::OK),
        vmi::Verdict::CounterOffer => Some(exit::COUNTER_OFFER),
        vmi::Verdict::Reject => Some(exit::REJECT),
        vmi::Verdict::Unspecified => None,
    }
}

/// The line printed on stderr for a failed command: `error: <code>: <message>`
/// for a gRPC status, `error: <chain of causes>` otherwise.
pub fn error_line(e: &anyhow::Error) -> String {
    match e.downcast_ref::<tonic::Status>() {
        Some(s) if s.message().is_empty() => format!("error: {:?}: {}", s.code(), s.code()),
        Some(s) => format!("error: {:?}: {}", s.code(), s.message()),
        None => format!("error: {e:#}"),
    }
}

/// Run a client subcommand, writing results to `out` and errors (and, with
/// `--output json`, `--wait` progress) to `err`; return the exit code.
pub async fn execute(cli: &Cli, poll: Duration, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    match dispatch(cli, poll, out, err).await {
        Ok(code) => code,
        // The reader went away (`veem events | head`): not an error of ours.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            exit::OK
        }
        Err(e) => {
            let _ = writeln!(err, "{}", error_line(&e));
            exit::of(&e)
        }
    }
}

pub(super) fn print(out: &mut dyn Write, text: &str) -> anyhow::Result<()> {
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Runs the command; when its VEEM went away mid-call ([`leader_lost`]),
/// runs it again on the site's leader, at most [`LEADER_RETRIES`] times,
/// half a second more apart each time (exit 1 after the last, saying so). Every run names the same request ID, so
/// a change the VEEM made before it went away is not made twice
/// (`api::server::replies`); consoles and event streams are not run again.
async fn dispatch(cli: &Cli, poll: Duration, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<u8> {
    let fmt = if cli.global.quiet { OutputFormat::Ids } else { cli.global.output };
    let request_id = match &cli.command {
        Command::Deploy { request_id: Some(id), .. } => id.clone(),
        _ => uuid::Uuid::new_v4().to_string(),
    };
    let again = !matches!(cli.command, Command::Console { .. } | Command::Events { .. });
    let mut tries = 0;
    loop {
        // YAML is the JSON, converted document by document as it is printed.
        let r = if fmt == OutputFormat::Yaml {
            let mut yaml = interfaces::output::YamlWriter::new(&mut *out);
            Box::pin(run(cli, OutputFormat::Json, poll, &mut yaml, err, &request_id)).await
        } else {
            run(cli, fmt, poll, out, err, &request_id).await
        };
        match r {
            Err(e) if again && leader_lost(&e) => {
                if tries == LEADER_RETRIES {
                    bail!(
                        "the site's VEEM went away mid-call (its leader changed or does not answer); asked {} times with request ID {request_id}, last: {}",
                        tries + 1,
                        error_line(&e).trim_start_matches("error: ")
                    );
                }
                tries += 1;
                tracing::warn!(request_id = %request_id, error = %format!("{e:#}"), "the VEEM went away mid-call: asking the site's leader again");
                tokio::time::sleep(Duration::from_millis(500) * tries).await;
            }
            r => return r,
        }
    }
}

async fn run(
    cli: &Cli,
    fmt: OutputFormat,
    poll: Duration,
    out: &mut dyn Write,
    err: &mut dyn Write,
    this_request: &str,
) -> anyhow::Result<u8> {
    // Read local files before connecting, so their errors come first.
    let manifest_toml = match &cli.command {
        Command::Negotiate { manifest } | Command::Deploy { manifest, .. } => {
            let text = read_manifest(manifest)?;
            // A manifest that does not parse or validate never leaves here
            // (exit 5, not a planner's rejection).
            interfaces::manifest::Manifest::from_toml(&text)
                .map_err(|e| anyhow::Error::from(e).context(format!("invalid manifest {}", manifest.display())))?;
            text
        }
        Command::Serve { .. } | Command::HashToken | Command::Doc(_) | Command::Store(_) => {
            bail!("`serve`, `store`, `hash-token`, `completions` and `man` are not VMI calls")
        }
        _ => String::new(),
    };
    let target = super::context::resolve(&cli.global, &|k| std::env::var(k).ok())?;
    let auth = super::AuthInterceptor::new(target.token.as_deref())?.with_request_id(this_request)?;
    let mut c = connect(&target.endpoint, auth.clone(), target.ca.as_deref(), cli.global.deadlines()).await?;
    match &cli.command {
        Command::Serve { .. } | Command::HashToken | Command::Doc(_) | Command::Store(_) => unreachable!("handled above"),
        Command::Negotiate { .. } => {
            let r = c.negotiate(vmi::NegotiateRequest { manifest_toml }).await?.into_inner();
            print(out, &output::negotiation(&Negotiation::from(&r), fmt))?;
            match verdict_exit_code(r.verdict()) {
                Some(code) => return Ok(code),
                None => bail!("unknown verdict {:?} from the VEEM", r.verdict),
            }
        }
        Command::Deploy { request_id, wait, .. } => {
            let req = vmi::DeployRequest {
                manifest_toml,
                request_id: request_id.clone().unwrap_or_else(|| this_request.to_string()),
            };
            let mut s = deploy_idempotent(&mut c, req.clone(), interfaces::retry::RetryPolicy::default()).await;
            // A site's VEEMs over etcd: its leader may have changed
            // meanwhile; the same request ID goes to the one leading now.
            for _ in 0..3 {
                match &s {
                    Err(e) if e.code() == tonic::Code::Unavailable && !read_only(e) && target.endpoint.contains(',') => {
                        c = connect(&target.endpoint, auth.clone(), target.ca.as_deref(), cli.global.deadlines()).await?;
                        s = deploy_idempotent(&mut c, req.clone(), interfaces::retry::RetryPolicy::default()).await;
                    }
                    _ => break,
                }
            }
            let s = s?;
            if wait.wait {
                let progress: &mut dyn Write = if matches!(fmt, OutputFormat::Json | OutputFormat::Ids) {
                    &mut *err
                } else {
                    &mut *out
                };
                print(progress, &format!("deployed service {}\n", s.service_id))?;
                return super::wait::service_running(&mut c, &s.service_id, false, wait.timeout, fmt, poll, out, err).await;
            }
            print(out, &output::deployed(&Service::from(&s), fmt))?;
        }
        Command::Services => {
            let list: Vec<Service> = pages::services(&c).await?.iter().map(Service::from).collect();
            print(out, &output::services(&list, fmt))?;
        }
        Command::Service { id } => {
            let s = or_lookup(&c, id, Kind::Service, |mut c, service_id| async move {
                c.get_service(vmi::GetServiceRequest { service_id }).await
            })
            .await?;
            print(out, &output::service(&Service::from(&s), fmt))?;
        }
        Command::Undeploy { id } => {
            let s = or_lookup(&c, id, Kind::Service, |mut c, service_id| async move {
                c.delete_service(vmi::DeleteServiceRequest { service_id }).await
            })
            .await?;
            print(out, &output::service(&Service::from(&s), fmt))?;
        }
        Command::Extend { id, until } => {
            let until_unix = *until;
            let s = or_lookup(&c, id, Kind::Service, |mut c, service_id| async move {
                c.extend_service(vmi::ExtendServiceRequest {
                    service_id,
                    until: interfaces::time::timestamp_s(until_unix),
                })
                .await
            })
            .await?;
            print(out, &output::service(&Service::from(&s), fmt))?;
        }
        Command::Scale {
            id,
            component,
            instances,
            wait,
        } => {
            let (component, instances) = (component.clone(), *instances);
            let s = or_lookup(&c, id, Kind::Service, |mut c, service_id| {
                let component = component.clone();
                async move {
                    c.scale_component(vmi::ScaleComponentRequest {
                        service_id,
                        component,
                        instances,
                    })
                    .await
                }
            })
            .await?;
            if wait.wait {
                return super::wait::service_running(&mut c, &s.service_id, true, wait.timeout, fmt, poll, out, err).await;
            }
            print(out, &output::service(&Service::from(&s), fmt))?;
        }
        Command::Update {
            id,
            component,
            image,
            rollback,
            max_unavailable,
            ready_timeout,
            wait,
        } => {
            let req = vmi::UpdateComponentRequest {
                service_id: String::new(),
                component: component.clone(),
                image: image.clone().unwrap_or_default(),
                max_unavailable: *max_unavailable,
                rollback: *rollback,
                ready_timeout: ready_timeout.and_then(|d| interfaces::time::duration_s(d.as_secs())),
            };
            let r = or_lookup(&c, id, Kind::Service, |mut c, service_id| {
                let req = vmi::UpdateComponentRequest { service_id, ..req.clone() };
                async move { c.update_component(req).await }
            })
            .await?;
            if wait.wait {
                return super::wait::rollout(&mut c, r, wait.timeout, fmt, poll, out, err).await;
            }
            print(out, &output::rollout(&Rollout::from(&r), fmt))?;
        }
        Command::Rollout { id, component } => {
            let component = component.clone();
            let r = or_lookup(&c, id, Kind::Service, |mut c, service_id| {
                let component = component.clone();
                async move { c.get_rollout(vmi::GetRolloutRequest { service_id, component }).await }
            })
            .await?;
            print(out, &output::rollout(&Rollout::from(&r), fmt))?;
        }
        Command::Resize { vee, vcpus, memory } => {
            let (vcpus, memory_mib) = (vcpus.unwrap_or(0), memory.unwrap_or(0));
            let v = or_lookup(&c, vee, Kind::Vee, |mut c, vee_id| async move {
                c.resize_vee(vmi::ResizeVeeRequest { vee_id, vcpus, memory_mib }).await
            })
            .await?;
            print(out, &output::vee(&Vee::from(&v), fmt))?;
        }
        Command::Ls { service } => {
            let word = service.clone().unwrap_or_default();
            let l = or_lookup(&c, &word, Kind::Service, |c, service_id| async move {
                pages::vees(&c, &service_id).await.map(tonic::Response::new)
            })
            .await?;
            let list: Vec<Vee> = l.iter().map(Vee::from).collect();
            print(out, &output::vees(&list, fmt))?;
        }
        Command::Show { vee } => {
            let v = or_lookup(&c, vee, Kind::Vee, |mut c, vee_id| async move {
                c.get_vee(vmi::GetVeeRequest { vee_id }).await
            })
            .await?;
            print(out, &output::vee(&Vee::from(&v), fmt))?;
        }
        Command::Console { vee, force } => {
            let v = or_lookup(&c, vee, Kind::Vee, |mut c, vee_id| async move {
                c.get_vee(vmi::GetVeeRequest { vee_id }).await
            })
            .await?;
            let raw = super::console::RawTerminal::enter();
            let ended = super::console::session(&mut c, &v.vee_id, *force, tokio::io::stdin(), out, err).await;
            drop(raw);
            match ended? {
                super::console::Ended::Detached => print(err, "\ndetached\n")?,
                super::console::Ended::Closed(why) => {
                    print(err, &format!("\n{}\n", if why.is_empty() { "the console closed" } else { &why }))?;
                    return Ok(super::exit::ERROR);
                }
            }
        }
        Command::Stop { vee } => vee_action(&mut c, vee, vmi::Action::Stop, None, fmt, out).await?,
        Command::Suspend { vee } => vee_action(&mut c, vee, vmi::Action::Suspend, None, fmt, out).await?,
        Command::Resume { vee } => vee_action(&mut c, vee, vmi::Action::Resume, None, fmt, out).await?,
        Command::Checkpoint { vee } => vee_action(&mut c, vee, vmi::Action::Checkpoint, None, fmt, out).await?,
        Command::Withdraw { vee } => vee_action(&mut c, vee, vmi::Action::Withdraw, None, fmt, out).await?,
        Command::Restore { vee, checkpoint } => vee_action(&mut c, vee, vmi::Action::Restore, checkpoint.as_deref(), fmt, out).await?,
        Command::Migrate {
            vee,
            to_host,
            to_site,
            reason,
            wait,
        } => {
            let req = vmi::MigrateRequest {
                vee_id: String::new(),
                to_host: to_host.clone().unwrap_or_default(),
                to_site: to_site.clone().unwrap_or_default(),
                reason: reason.clone().unwrap_or_default(),
            };
            let m = or_lookup(&c, vee, Kind::Vee, |mut c, vee_id| {
                let req = vmi::MigrateRequest { vee_id, ..req.clone() };
                async move { c.migrate(req).await }
            })
            .await?;
            if wait.wait {
                return super::wait::migration(&mut c, m, wait.timeout, fmt, poll, out, err).await;
            }
            print(out, &output::migration(&Migration::from(&m), fmt))?;
        }
        Command::Migrations => {
            let list: Vec<Migration> = pages::migrations(&c).await?.iter().map(Migration::from).collect();
            print(out, &output::migrations(&list, fmt))?;
        }
        Command::Approve { id, wait } => {
            let m = or_lookup(&c, id, Kind::Migration, |mut c, migration_id| async move {
                c.approve_migration(vmi::ApproveMigrationRequest { migration_id }).await
            })
            .await?;
            if wait.wait {
                return super::wait::migration(&mut c, m, wait.timeout, fmt, poll, out, err).await;
            }
            print(out, &output::migration(&Migration::from(&m), fmt))?;
        }
        Command::Reject { id, reason } => {
            let m = or_lookup(&c, id, Kind::Migration, |mut c, migration_id| {
                let reason = reason.clone();
                async move { c.reject_migration(vmi::RejectMigrationRequest { migration_id, reason }).await }
            })
            .await?;
            print(out, &output::migration(&Migration::from(&m), fmt))?;
        }
        Command::Drain { host } => {
            let l = c.drain(vmi::DrainRequest { host: host.clone() }).await?.into_inner();
            let list: Vec<Migration> = l.migrations.iter().map(Migration::from).collect();
            print(out, &output::migrations(&list, fmt))?;
        }
        Command::Events { service, follow, after } => {
            let word = service.clone().unwrap_or_default();
            if !follow {
                let service_id = match service {
                    Some(_) => {
                        or_lookup(&c, &word, Kind::Service, |mut c, service_id| async move {
                            c.get_service(vmi::GetServiceRequest { service_id }).await
                        })
                        .await?
                        .service_id
                    }
                    None => String::new(),
                };
                let each = |e: &vmi::Event| print(out, &output::event(&Event::from(e), fmt));
                pages::events(&c, &service_id, after.unwrap_or(0), each).await?;
            } else {
                let mut stream = or_lookup(&c, &word, Kind::Service, |mut c, service_id| async move {
                    c.watch_events(vmi::WatchEventsRequest {
                        service_id,
                        history_only: false,
                    })
                    .await
                })
                .await?;
                while let Some(e) = stream.message().await? {
                    print(out, &output::event(&Event::from(&e), fmt))?;
                }
            }
        }
        Command::Hosts => {
            print(out, &output::hosts(&pages::hosts(&c).await?, fmt))?;
        }
        Command::Limits => {
            print(out, &output::usage_limits(&pages::usage_limits(&c).await?, fmt))?;
        }
        Command::Violations { service } => {
            let ids: Vec<String> = match service {
                Some(s) => vec![
                    or_lookup(&c, s, Kind::Service, |mut c, service_id| async move {
                        c.get_service(vmi::GetServiceRequest { service_id }).await
                    })
                    .await?
                    .service_id,
                ],
                None => pages::services(&c).await?.into_iter().map(|s| s.service_id).collect(),
            };
            let mut all = Vec::new();
            for service_id in ids {
                let u = c
                    .get_usage(vmi::GetUsageRequest {
                        service_id: service_id.clone(),
                    })
                    .await?
                    .into_inner();
                all.extend(u.violations.iter().map(|v| (service_id.clone(), SlaViolation::from(v))));
            }
            print(out, &output::violations(&all, fmt))?;
        }
        Command::Usage {
            service,
            from,
            to,
            group_by,
        } => {
            let mut u = or_lookup(&c, service, Kind::Service, |mut c, service_id| async move {
                c.get_usage(vmi::GetUsageRequest { service_id }).await
            })
            .await?;
            let (from, to) = (from.unwrap_or(i64::MIN), to.unwrap_or(i64::MAX));
            u.records
                .retain(|r| interfaces::time::s_of(&r.end_time) > from && interfaces::time::s_of(&r.start_time) < to);
            match group_by {
                Some(key) => print(out, &output::usage_groups(&crate::api::model::usage_groups(&u.records, *key), fmt))?,
                None => print(out, &output::usage(&Usage::from(&u), fmt))?,
            }
        }
    }
    Ok(exit::OK)
}

async fn vee_action(
    c: &mut VmiServiceClient,
    vee: &str,
    action: vmi::Action,
    checkpoint: Option<&str>,
    fmt: OutputFormat,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let checkpoint_id = checkpoint.unwrap_or_default().to_string();
    let v = or_lookup(c, vee, Kind::Vee, |mut c, vee_id| {
        let checkpoint_id = checkpoint_id.clone();
        async move {
            c.vee_action(vmi::VeeActionRequest {
                vee_id,
                action: action as i32,
                checkpoint_id,
            })
            .await
        }
    })
    .await?;
    print(out, &output::vee(&Vee::from(&v), fmt))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiate_verdict_exit_codes() {
        assert_eq!(verdict_exit_code(vmi::Verdict::Accept), Some(0));
        assert_eq!(verdict_exit_code(vmi::Verdict::CounterOffer), Some(3));
        assert_eq!(verdict_exit_code(vmi::Verdict::Reject), Some(4));
        assert_eq!(verdict_exit_code(vmi::Verdict::Unspecified), None);
    }

    #[test]
    fn status_error_line() {
        let e = anyhow::Error::from(tonic::Status::not_found("no VEE x"));
        assert_eq!(error_line(&e), "error: NotFound: no VEE x");
        let e = anyhow::Error::from(tonic::Status::permission_denied(""));
        assert!(error_line(&e).starts_with("error: PermissionDenied: "));
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_line(&e), "error: outer: inner");
    }

    #[test]
    fn wait_lines() {
        let now = chrono::DateTime::from_timestamp(1_795_852_800, 0).unwrap();
        let mut m = vmi::MigrationInfo {
            migration_id: "m-1".into(),
            source: "local (h1)".into(),
            destination: "remote (site-b)".into(),
            state: vmi::MigrationState::Approved as i32,
            detail: "queued".into(),
            ..Default::default()
        };
        assert_eq!(progress_line(&m, now), "2026-11-28T08:00:00Z m-1: approved\n");
        m.state = vmi::MigrationState::Running as i32;
        m.detail = "disk 40%".into();
        assert_eq!(progress_line(&m, now), "2026-11-28T08:00:00Z m-1: running: disk 40%\n");
        m.state = vmi::MigrationState::Done as i32;
        m.total = interfaces::time::duration_ms(2100);
        m.downtime = interfaces::time::duration_ms(80);
        assert_eq!(
            outcome_line(&m),
            "migration m-1 done: local (h1) -> remote (site-b) in 2100 ms (downtime 80 ms)\n"
        );
        m.state = vmi::MigrationState::Failed as i32;
        m.detail = "destination refused".into();
        assert_eq!(outcome_line(&m), "migration m-1 failed: destination refused\n");
        use super::super::wait::{is_terminal, outcome_line, progress_line};
        assert!(
            is_terminal(vmi::MigrationState::Done)
                && is_terminal(vmi::MigrationState::Failed)
                && is_terminal(vmi::MigrationState::Rejected)
        );
        assert!(!is_terminal(vmi::MigrationState::Running) && !is_terminal(vmi::MigrationState::Proposed));
    }
}
