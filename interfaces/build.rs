fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Every enum of both interfaces shows, serialises and parses as its
    // kebab-case name without the prefix (`VEE_STATE_RUNNING` is
    // "running", `VERDICT_COUNTER_OFFER` "counter-offer"): the text the CLI
    // prints and `-o json` writes.
    const ENUM_ATTRS: &str = "#[derive(serde::Serialize, serde::Deserialize, strum::Display, strum::EnumString)] \
         #[serde(rename_all = \"kebab-case\")] #[strum(serialize_all = \"kebab-case\")]";
    // vmi.proto imports vhi.proto; its vhi messages are crate::vhi's. The
    // vmi pass also writes a partial vhi.v1.rs, so vhi is compiled last.
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .file_descriptor_set_path(out.join("vmi_descriptor.bin"))
        .extern_path(".vhi.v1", "crate::vhi")
        .enum_attribute(".vmi.v1", ENUM_ATTRS)
        .compile_protos(&["proto/vmi/v1/vmi.proto"], &["proto"])?;
    // A VEEH keeps a VEE's NICs in its own record (veeh's vee.json).
    tonic_prost_build::configure()
        .file_descriptor_set_path(out.join("vhi_descriptor.bin"))
        .enum_attribute(".vhi.v1", ENUM_ATTRS)
        .type_attribute(".vhi.v1.Nic", "#[derive(serde::Serialize, serde::Deserialize)] #[serde(default)]")
        .type_attribute(
            ".vhi.v1.NetworkMember",
            "#[derive(serde::Serialize, serde::Deserialize)] #[serde(default)]",
        )
        .type_attribute(".vhi.v1.Vtep", "#[derive(serde::Serialize, serde::Deserialize)] #[serde(default)]")
        .type_attribute(
            ".vhi.v1.CloudInit",
            "#[derive(serde::Serialize, serde::Deserialize)] #[serde(default)]",
        )
        .compile_protos(&["proto/vhi/v1/vhi.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
