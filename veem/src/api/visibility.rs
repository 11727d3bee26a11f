//! What a VMI caller may learn of where VEEs run (E §3.4, location
//! unawareness): a service provider sees its VEEs' states but never the
//! hosts or sites they run on; a peer site sees the VEEs it placed here but
//! not this site's hosts; the operator sees everything.
//!
//! Views built from records leave locations out by construction (the
//! server's `vee_info`, `migration_info`, usage records); free text
//! (events, violation terms, migration details) goes through [`Redactor`],
//! which replaces every host name of this site and every site ID this site
//! knows (its own and its peers') with `[host]` / `[site]`.

use crate::config::{Role, VeemConfig};

/// Replaces the names a role may not see in free text. `None` from
/// [`Redactor::for_role`] means the role sees everything.
#[derive(Clone, Debug)]
pub struct Redactor {
    /// (name, placeholder), longest name first so that `h10` is not read
    /// as `h1` followed by `0`.
    names: Vec<(String, &'static str)>,
}

/// The placeholder of a host name in a redacted text.
pub const HOST: &str = "[host]";
/// The placeholder of a site ID in a redacted text.
pub const SITE: &str = "[site]";

impl Redactor {
    /// What `role` may not see of site `cfg` with hosts `hosts`: providers
    /// neither hosts nor sites, peers not hosts, operators nothing hidden
    /// (`None`).
    pub fn for_role(cfg: &VeemConfig, hosts: &[String], role: &Role) -> Option<Self> {
        let mut names: Vec<(String, &'static str)> = hosts.iter().map(|h| (h.clone(), HOST)).collect();
        match role {
            Role::Operator => return None,
            Role::Peer(_) => {}
            Role::Provider(_) => {
                names.push((cfg.site_id.clone(), SITE));
                names.extend(cfg.peers.iter().map(|p| (p.site_id.clone(), SITE)));
            }
        }
        names.retain(|(n, _)| !n.is_empty());
        names.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
        Some(Redactor { names })
    }

    /// `text` with every whole-word occurrence of a hidden name replaced by
    /// its placeholder. A word is bounded by anything but an ASCII letter,
    /// digit, `-` or `_` (so `host:h1`, `h1,` and `(site-b)` are found, and
    /// `h1x` or `site-bb` are not).
    pub fn text(&self, text: &str) -> String {
        let word = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        let mut out = String::with_capacity(text.len());
        let mut i = 0;
        'scan: while i < text.len() {
            let at_boundary = text[..i].chars().next_back().is_none_or(|c| !word(c));
            if at_boundary {
                for (name, placeholder) in &self.names {
                    let end = i + name.len();
                    if text[i..].starts_with(name.as_str()) && text[end..].chars().next().is_none_or(|c| !word(c)) {
                        out.push_str(placeholder);
                        i = end;
                        continue 'scan;
                    }
                }
            }
            let c = text[i..].chars().next().expect("inside the text");
            out.push(c);
            i += c.len_utf8();
        }
        out
    }
}

/// Applies an optional redactor: the text itself when there is none.
pub fn redact(r: Option<&Redactor>, text: &str) -> String {
    r.map_or_else(|| text.to_string(), |r| r.text(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redactor(role: Role) -> Option<Redactor> {
        let cfg = VeemConfig::parse(
            "site_id = \"site-a\"\nlisten = \"127.0.0.1:7200\"\ndb = \"/tmp/x\"\nimage_repo = \"http://127.0.0.1:7000\"\n\
             [[peers]]\nsite_id = \"site-b\"\nendpoint = \"http://127.0.0.1:7300\"\ntoken = \"t\"\n[peers.agreement]\nprice_per_vee_hour = 0.5\n",
        )
        .unwrap();
        Redactor::for_role(&cfg, &["h1".into(), "h10".into(), "node.lab".into()], &role)
    }

    #[test]
    fn a_provider_sees_neither_hosts_nor_sites() {
        let r = redactor(Role::Provider("acme".into())).unwrap();
        assert_eq!(r.text("admitted on h1"), "admitted on [host]");
        assert_eq!(r.text("m-1 host:h10 -> site:site-b: done"), "m-1 host:[host] -> site:[site]: done");
        assert_eq!(r.text("trying node.lab, then site-a (h1)."), "trying [host], then [site] ([host]).");
        // Only whole words: names inside other words stay.
        assert_eq!(r.text("h1x site-bb ah1 sh10"), "h1x site-bb ah1 sh10");
        assert_eq!(r.text("ünïcode h1 ✓"), "ünïcode [host] ✓");
    }

    #[test]
    fn a_peer_sees_sites_but_not_hosts_and_an_operator_everything() {
        let r = redactor(Role::Peer("site-b".into())).unwrap();
        assert_eq!(r.text("from site-b on h1"), "from site-b on [host]");
        assert!(redactor(Role::Operator).is_none());
        assert_eq!(redact(None, "on h1"), "on h1");
    }
}
