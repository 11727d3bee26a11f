//! `image-repo`: see `image-repo --help`.

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    image_repo::cli::main().await
}
