//! The image repository of the VEE manager (DESIGN.md §2-3): an HTTP server
//! of content-addressed blobs (disk images, kernels, initrds, checkpoints)
//! with metadata and pins, and the `image-repo` command line. The client
//! library lives in `interfaces::repo_client`.

pub mod cli;
pub mod server;
