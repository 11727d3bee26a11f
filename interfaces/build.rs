fn main() -> Result<(), Box<dyn std::error::Error>> {
    tonic_build::configure().compile_protos(&["proto/vhi.proto", "proto/vmi.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
