//! Loading the configuration: files, flags, defaults and what is refused.

use super::*;

#[test]
fn the_packaged_configuration_loads_with_its_metrics_on_loopback() {
    let file = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../packaging/config/image-repo.toml"));
    // Its operator token file is the installer's to write: a flag's.
    let flag = Overrides {
        token: Some("operator-token-of-the-test".into()),
        ..Default::default()
    };
    let c = Config::load(Some(file), flag).unwrap();
    assert_eq!(c.metrics.unwrap().listen, "127.0.0.1:9480".parse().unwrap());
    let e = format!("{:#}", Config::load(Some(file), Overrides::default()).unwrap_err());
    assert!(
        e.contains("field `token_file`") && e.contains("/etc/image-repo/operator.token"),
        "{e}"
    );
}

/// The operator's token is read from a file only the daemon may read:
/// one every user may read is refused, naming the field.
#[test]
fn the_operator_token_is_read_from_a_file_others_cannot_read() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("operator.token");
    std::fs::write(&token, "operator-token-from-a-file\n").unwrap();
    let file = dir.path().join("repo.toml");
    std::fs::write(
        &file,
        format!("data = \"/x\"\ntoken_file = {:?}\ninsecure = true\n", token.display()),
    )
    .unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o604)).unwrap();
    let e = format!("{:#}", Config::load(Some(&file), Overrides::default()).unwrap_err());
    assert!(e.contains("field `token_file`") && e.contains("readable by every user"), "{e}");
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(
        Config::load(Some(&file), Overrides::default()).unwrap().token,
        "operator-token-from-a-file"
    );
}

/// The head limit leaves room for the largest metadata of a push, with
/// or without a `[listener]` table; a smaller one is refused, named.
#[test]
fn the_head_limit_leaves_room_for_the_largest_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("repo.toml");
    let base = "data = \"/x\"\ntoken = \"t\"\ninsecure = true\n";
    for extra in ["", "[listener]\nidle_timeout = \"5s\"\n"] {
        std::fs::write(&file, format!("{base}{extra}")).unwrap();
        let c = Config::load(Some(&file), Overrides::default()).unwrap();
        assert_eq!(c.limits().max_header_size, DEFAULT_HEADER_SIZE, "{extra}");
    }
    std::fs::write(&file, format!("{base}[listener]\nmax_header_size = \"16 KiB\"\n")).unwrap();
    let err = format!("{:#}", Config::load(Some(&file), Overrides::default()).unwrap_err());
    assert!(err.contains("`listener.max_header_size`") && err.contains("62610"), "{err}");
    std::fs::write(&file, format!("{base}[listener]\nmax_header_size = \"1 MiB\"\n")).unwrap();
    assert_eq!(
        Config::load(Some(&file), Overrides::default()).unwrap().listener.max_header_size,
        1 << 20
    );
    for (key, value) in [
        ("max_pins_per_blob", "0"),
        ("max_pins_per_blob", "1025"),
        ("max_uploads_in_flight", "0"),
    ] {
        std::fs::write(&file, format!("{key} = {value}\n{base}")).unwrap();
        let err = format!("{:#}", Config::load(Some(&file), Overrides::default()).unwrap_err());
        assert!(err.contains(&format!("`{key}`")), "{err}");
    }
}

#[test]
fn flags_override_file_and_required_fields_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("repo.toml");
    std::fs::write(&file, "data = \"/srv/repo\"\ntoken = \"file-token\"\ninsecure = true\n").unwrap();
    let over = Overrides {
        token: Some("flag-token".into()),
        ..Default::default()
    };
    let c = Config::load(Some(&file), over).unwrap();
    assert_eq!(c.token, "flag-token");
    assert_eq!(c.data, Path::new("/srv/repo"));
    assert_eq!(c.listen.to_string(), DEFAULT_LISTEN);

    let err = Config::load(
        None,
        Overrides {
            data: Some("/x".into()),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("`token` or `token_file` is required"), "{err}");

    std::fs::write(&file, "data = \"/x\"\ntoken = \"t\"\n").unwrap();
    let err = format!("{:#}", Config::load(Some(&file), Overrides::default()).unwrap_err());
    assert!(err.contains("field `tls`") && err.contains("insecure"), "{err}");

    // Errors name the file, the line and column and the field.
    std::fs::write(&file, "data = \"/x\"\ntoken = \"t\"\nlisten = 5\n").unwrap();
    let err = format!("{:#}", Config::load(Some(&file), Overrides::default()).unwrap_err());
    assert!(err.starts_with(&format!("{}:3:1: field `listen`: ", file.display())), "{err}");
    // A TOML syntax error: where it is, in the same style.
    std::fs::write(&file, "data = \"/x\"\n[oops\n").unwrap();
    let err = format!("{:#}", Config::load(Some(&file), Overrides::default()).unwrap_err());
    assert!(err.starts_with(&format!("{}:2:", file.display())), "{err}");
    // Sizes and durations with units; the older integer keys still read.
    let units = "data = \"/x\"\ntoken = \"t\"\ninsecure = true\nmax_size = \"500 GB\"\nreserve = \"1 GiB\"\nheader_timeout = \"2s\"\n";
    std::fs::write(&file, units).unwrap();
    let c = Config::load(Some(&file), Overrides::default()).unwrap();
    assert_eq!(
        (c.max_size, c.reserve, c.header_timeout),
        (Some(Size(500_000_000_000)), Size(1 << 30), Duration::from_secs(2))
    );
    std::fs::write(
        &file,
        "data = \"/x\"\ntoken = \"t\"\ninsecure = true\nmax_bytes = 7\nheader_timeout_s = 3\n",
    )
    .unwrap();
    let c = Config::load(Some(&file), Overrides::default()).unwrap();
    assert_eq!((c.max_size, c.header_timeout), (Some(Size(7)), Duration::from_secs(3)));

    std::fs::write(&file, "data = \"/x\"\ntoken = \"t\"\ncolour = 1\n").unwrap();
    let err = format!("{:#}", Config::load(Some(&file), Overrides::default()).unwrap_err());
    assert!(err.contains("colour"), "{err}");

    let base = "data = \"/x\"\ntoken = \"operator-token\"\ninsecure = true\n";
    for (entry, why) in [
        (
            "name = \"operator\"\nrole = \"site\"\ntoken = \"site-token\"",
            "`tokens[0].name`: \"operator\" is taken",
        ),
        ("name = \"a b\"\nrole = \"site\"\ntoken = \"site-token\"", "`tokens[0].name`"),
        ("name = \"acme\"\nrole = \"provider\"\ntoken = \"operator-token\"", "same token"),
        ("name = \"acme\"\nrole = \"provider\"\ntoken = \"short\"", "`tokens[0].token`"),
        ("name = \"acme\"\nrole = \"tenant\"\ntoken = \"acme-token\"", "role"),
    ] {
        std::fs::write(&file, format!("{base}[[tokens]]\n{entry}\n")).unwrap();
        let err = format!("{:#}", Config::load(Some(&file), Overrides::default()).unwrap_err());
        assert!(err.contains(why), "{entry}: {err}");
    }
}
