//! The command line as `veem` parses it: [`Cli`]'s derive, with the
//! client options (`--endpoint`, `--token-file`, `--output`, ...: the
//! global arguments of [`super::GlobalOpts`]) kept off the commands that
//! call no VEEM (`serve`, `store`, `hash-token`, `completions`, `man`).
//! Those neither show the options in their help nor take them: clap
//! gives a global argument to every subcommand that has none of that
//! name, so each of them has a hidden one that refuses any use.

use clap::{Arg, ArgAction, Command, CommandFactory, FromArgMatches};

use super::Cli;

/// The subcommands that call no VEEM.
pub const DAEMON_COMMANDS: [&str; 5] = ["serve", "store", "hash-token", "completions", "man"];

impl Cli {
    /// The `veem` command line (what `--help`, the man page and the
    /// completions show).
    pub fn definition() -> Command {
        let root = interfaces::daemon::name_self_doc(<Cli as CommandFactory>::command());
        let client: Vec<Arg> = root.get_arguments().filter(|a| a.is_global_set()).cloned().collect();
        DAEMON_COMMANDS.iter().fold(root, |root, name| {
            root.mut_subcommand(name, |sub| client.iter().fold(sub, |sub, a| sub.arg(refused(a, name))))
        })
    }

    /// Parses the process's arguments (exits with [`super::exit::USAGE`]
    /// on a bad command line, 0 after `--help` or `--version`).
    pub fn parse_args() -> Self {
        Self::from_arg_matches(&Self::definition().get_matches()).unwrap_or_else(|e| e.exit())
    }

    /// Parses `args` (the first is the program's name).
    pub fn try_parse_args_from<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        Self::from_arg_matches(&Self::definition().try_get_matches_from(args)?)
    }
}

/// The stand-in of client option `client` under subcommand `command`:
/// hidden, and an error whenever given, with or without a value.
fn refused(client: &Arg, command: &str) -> Arg {
    let why = format!("a client option: `veem {command}` calls no VEEM");
    client
        .clone()
        .hide(true)
        .env(None::<&'static str>)
        .default_value(None::<&'static str>)
        .action(ArgAction::Set)
        .num_args(0..=1)
        .default_missing_value("")
        .value_parser(move |_: &str| Err::<String, String>(why.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{exit, Command, OutputFormat, StoreCommand};

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_args_from(std::iter::once("veem").chain(args.iter().copied()))
    }

    /// A client command takes the client options before or after its
    /// name.
    #[test]
    fn client_commands_take_the_client_options_anywhere() {
        let cli = parse(&["ls", "--endpoint", "https://a:7200", "-o", "json", "--request-timeout", "5s"]).unwrap();
        assert_eq!(cli.global.endpoint.as_deref(), Some("https://a:7200"));
        assert_eq!(cli.global.output, OutputFormat::Json);
        assert_eq!(cli.global.request_timeout, std::time::Duration::from_secs(5));
        let cli = parse(&["-q", "--ca", "ca.pem", "ls"]).unwrap();
        assert!(cli.global.quiet);
        assert_eq!(cli.global.ca.as_deref(), Some(std::path::Path::new("ca.pem")));
    }

    /// The commands that call no VEEM neither list the client options nor
    /// take them (a usage error, exit 2, naming why).
    #[test]
    fn daemon_commands_neither_show_nor_take_the_client_options() {
        for args in [
            &["serve", "--endpoint", "https://a:7200"][..],
            &["serve", "-o", "json"],
            &["serve", "--quiet"],
            &["store", "migrate", "--from", "etcd", "--to", "sled:/tmp/x", "--token-file", "t"],
            &["hash-token", "-q"],
            &["man", "--request-timeout", "5s"],
        ] {
            let e = parse(args).err().unwrap_or_else(|| panic!("{args:?} parsed"));
            assert_eq!(e.exit_code(), i32::from(exit::USAGE), "{args:?}");
            assert!(e.to_string().contains("calls no VEEM"), "{args:?}: {e}");
        }
        assert!(matches!(
            parse(&["store", "migrate", "--from", "etcd", "--to", "sled:/tmp/x"])
                .unwrap()
                .command,
            Command::Store(StoreCommand::Migrate { .. })
        ));
        let mut cmd = Cli::definition();
        // As parsing does: the global arguments given to the subcommands.
        cmd.build();
        let client: Vec<String> = cmd
            .get_arguments()
            .filter(|a| a.is_global_set())
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .collect();
        assert_eq!(client.len(), 8, "{client:?}");
        for path in [
            &["serve"][..],
            &["store"],
            &["store", "migrate"],
            &["hash-token"],
            &["man"],
            &["completions"],
        ] {
            let mut sub = &mut cmd;
            for name in path {
                sub = sub.find_subcommand_mut(name).unwrap();
            }
            let help = sub.render_long_help().to_string();
            for flag in &client {
                assert!(
                    !help.contains(flag.as_str()),
                    "veem {} --help shows {flag}:\n{help}",
                    path.join(" ")
                );
            }
        }
        let help = cmd.find_subcommand_mut("ls").unwrap().render_long_help().to_string();
        assert!(help.contains("--endpoint"), "{help}");
    }
}
