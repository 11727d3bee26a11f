//! What each subcommand does.

use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result};
use interfaces::repo_client::{BlobKind, PushMeta, RepoClient};

use super::progress::Bar;
use super::{output, Command, Format, IdArgs, PushArgs, PushImageArgs, RepoArgs, ServeArgs};
use crate::server::{self, Config, Overrides, Server};

/// The first bytes of a qcow2 image.
const QCOW2_MAGIC: &[u8; 4] = b"QFI\xfb";

/// Runs one subcommand. Errors: whatever failed, with context.
pub async fn run(command: Command) -> Result<()> {
    match command {
        Command::Serve(args) => serve(args).await,
        Command::Push(args) => push(args).await,
        Command::PushImage(args) => push_image(args).await,
        Command::Pull(args) => {
            let repo = client(&args.repo)?;
            let bar = Bar::new(&format!("pull {}", short(&args.id.to_string())));
            let callback = bar.callback();
            let result = repo.pull(&args.id, &args.dest, Some(&callback)).await;
            bar.finish();
            let size = result?;
            println!("pulled {} to {} ({size} bytes, sha256 verified)", args.id, args.dest.display());
            Ok(())
        }
        Command::Ls(args) => {
            let blobs = client(&args.repo)?.list().await?;
            match args.output {
                _ if args.quiet => blobs.iter().for_each(|b| println!("{}", b.id)),
                Format::Json => println!("{}", serde_json::to_string_pretty(&Items { items: &blobs })?),
                Format::Yaml => print!("{}", interfaces::output::yaml(&serde_json::to_vec(&Items { items: &blobs })?)?),
                Format::Table => print!("{}", output::table(&blobs)),
            }
            Ok(())
        }
        Command::Show(args) => {
            let meta = client(&args.repo)?
                .head(&args.id)
                .await?
                .ok_or_else(|| interfaces::Error::BlobNotFound { id: args.id.to_string() })?;
            match args.output {
                Format::Json => println!("{}", serde_json::to_string_pretty(&meta)?),
                Format::Yaml => print!("{}", interfaces::output::yaml(&serde_json::to_vec(&meta)?)?),
                Format::Table => print!("{}", output::details(&meta)),
            }
            Ok(())
        }
        Command::Gc(args) => {
            let out = client(&args.repo)?.gc(args.grace, args.dry_run).await?;
            for id in &out.removed {
                println!("{id}");
            }
            let verb = if out.dry_run { "would remove" } else { "removed" };
            eprintln!("{verb} {} blobs, {} bytes", out.removed.len(), out.bytes);
            Ok(())
        }
        Command::Rm(args) => {
            client(&args.repo)?.delete(&args.id, args.force).await?;
            println!("deleted {}", args.id);
            Ok(())
        }
        Command::Pin(args) => {
            client(&args.repo)?.pin(&args.id, &args.name).await?;
            println!("pinned {} as {}", args.id, args.name);
            Ok(())
        }
        Command::Unpin(args) => {
            client(&args.repo)?.unpin(&args.id, &args.name).await?;
            println!("unpinned {} from {}", args.id, args.name);
            Ok(())
        }
        Command::Share(args) => {
            client(&args.repo)?.share(&args.id, &args.name).await?;
            println!("shared {} with {}", args.id, args.name);
            Ok(())
        }
        Command::Public(args) => set_public(args, true).await,
        Command::Private(args) => set_public(args, false).await,
        Command::HashToken => {
            let mut token = String::new();
            std::io::stdin().read_line(&mut token)?;
            println!("{}", interfaces::tokens::digest_hex(token.trim()));
            Ok(())
        }
        Command::Doc(doc) => Ok(interfaces::daemon::write_self_doc(&doc, super::command(), &mut std::io::stdout())?),
    }
}

async fn set_public(args: IdArgs, public: bool) -> Result<()> {
    client(&args.repo)?.set_public(&args.id, public).await?;
    println!("{} is {}", args.id, if public { "public" } else { "private" });
    Ok(())
}

async fn serve(args: ServeArgs) -> Result<()> {
    let overrides = Overrides {
        listen: args.listen,
        data: args.data,
        token: super::token(args.token.as_deref(), args.token_file.as_deref(), "IMAGE_REPO_WRITE_TOKEN")?,
        max_bytes: args.max_bytes,
        tls: args
            .tls_cert
            .zip(args.tls_key)
            .map(|(cert, key)| server::config::ServerTls { cert, key }),
        insecure: args.insecure,
    };
    let default = Path::new(server::config::DEFAULT_CONFIG);
    let file = args.config.as_deref().or(default.exists().then_some(default));
    let config = Config::load(file, overrides)?;
    let server = Server::bind(config).await?;
    // Plain line on stdout so that scripts and tests learn the bound port.
    println!("listening on {}", server.local_addr()?);
    server.run(interfaces::daemon::shutdown_signal()).await
}

async fn push(args: PushArgs) -> Result<()> {
    let repo = client(&args.repo)?;
    let name = match args.name {
        Some(n) => n,
        None => args
            .file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .with_context(|| format!("{} has no file name; pass --name", args.file.display()))?,
    };
    let format = match (args.format, args.kind) {
        (Some(f), _) => Some(f),
        (None, BlobKind::Disk) => Some(sniff_format(&args.file)?.to_string()),
        (None, _) => None,
    };
    let meta = PushMeta {
        name,
        kind: args.kind,
        format,
        labels: args.labels.into_iter().collect(),
    };
    let bar = Bar::new(&format!("push {}", meta.name));
    let callback = bar.callback();
    let result = repo.push_file_with_progress(&args.file, &meta, Some(&callback)).await;
    bar.finish();
    println!("{}", result?);
    Ok(())
}

/// `qcow2` if the file starts with the qcow2 magic, else `raw`.
fn sniff_format(path: &Path) -> Result<&'static str> {
    let mut magic = [0u8; 4];
    let mut file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let n = file.read(&mut magic).with_context(|| format!("reading {}", path.display()))?;
    Ok(if n == 4 && &magic == QCOW2_MAGIC { "qcow2" } else { "raw" })
}

fn client(args: &RepoArgs) -> Result<RepoClient> {
    let token = super::token(args.token.as_deref(), args.token_file.as_deref(), "IMAGE_REPO_TOKEN")?;
    Ok(RepoClient::with_ca(&args.repo, token, args.ca.as_deref())?)
}

/// `sha256:0123456789ab` for progress labels.
fn short(id: &str) -> &str {
    &id[..id.len().min(19)]
}

/// A list as veem prints it: `{"items": [...]}`, each item's fields in
/// their order.
#[derive(serde::Serialize)]
struct Items<'a, T> {
    items: &'a [T],
}

/// `push-image`: the files as a VEE image artifact
/// (`interfaces::artifact`), pushed through `oci-client`.
async fn push_image(args: PushImageArgs) -> Result<()> {
    use interfaces::artifact;
    use interfaces::manifest::ImageRef;
    use interfaces::registry::{Registries, RegistryConfig, Scope};
    let ImageRef::Registry(image) = args.reference.parse::<ImageRef>()? else {
        anyhow::bail!(
            "{}: give REGISTRY/REPOSITORY:TAG (a content ID is pushed with `image-repo push`)",
            args.reference
        );
    };
    let registries = Registries::new(&[RegistryConfig {
        host: image.registry.clone(),
        ca: args.ca,
        username: args.username,
        password_file: args.password_file,
        scope: Scope::Any,
        realm_hosts: args.realm_hosts,
    }])?;
    let mut magic = [0u8; 4];
    std::fs::File::open(&args.disk)
        .and_then(|mut f| f.read_exact(&mut magic))
        .with_context(|| format!("{}", args.disk.display()))?;
    let disk = if &magic == QCOW2_MAGIC {
        artifact::DISK_QCOW2
    } else {
        artifact::DISK_RAW
    };
    let mut files = vec![(disk, args.disk.as_path())];
    files.extend(args.kernel.as_deref().map(|k| (artifact::KERNEL, k)));
    files.extend(args.initrd.as_deref().map(|i| (artifact::INITRD, i)));
    let digest = registries.push_image(&image, &files).await?;
    println!("pushed {image} ({digest})");
    println!("{}", image.resolved(digest));
    Ok(())
}
