fn main() -> Result<(), Box<dyn std::error::Error>> {
    // vmi.proto imports vhi.proto; its vhi messages are crate::vhi's. The
    // vmi pass also writes a partial vhi.v1.rs, so vhi is compiled last.
    tonic_build::configure()
        .extern_path(".vhi.v1", "crate::vhi")
        .compile_protos(&["proto/vmi.proto"], &["proto"])?;
    tonic_build::configure().compile_protos(&["proto/vhi.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
