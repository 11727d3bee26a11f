//! Reading a domain XML back (the owner mark, the bridges) and rewriting it
//! for the host that receives the VEE (a live migration or a restore).

use std::path::{Path, PathBuf};

use super::{esc, METADATA_NS};

fn p(path: &Path) -> String {
    esc(&path.display().to_string())
}

/// What the VEEH's metadata in a domain XML says.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Ownership {
    pub owner: String,
    pub service_id: String,
}

/// Reads the owner mark from a full domain XML. `None` when the domain has
/// no VEEH metadata (it is not ours, whoever made it).
pub fn ownership(xml: &str) -> Option<Ownership> {
    let doc = roxmltree::Document::parse(xml).ok()?;
    let vee = doc
        .descendants()
        .find(|n| n.tag_name().name() == "vee" && n.tag_name().namespace() == Some(METADATA_NS))?;
    let text = |tag: &str| {
        vee.children()
            .find(|c| c.tag_name().name() == tag)
            .and_then(|c| c.text())
            .unwrap_or_default()
            .to_string()
    };
    Some(Ownership {
        owner: text("owner"),
        service_id: text("service"),
    })
}

/// The qualified name of start tag `open` (`<veeh:owner xmlns:…` →
/// `veeh:owner`).
fn qname(open: &str) -> &str {
    open.trim_start_matches('<')
        .split(|c: char| c.is_whitespace() || c == '>' || c == '/')
        .next()
        .unwrap_or_default()
}

/// Paths in a domain XML that a live migration or a restore must point at
/// the receiving host's files, and the receiving host's bridge of each
/// interface (by MAC: a network stretched to a peer site has another
/// bridge there).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PathMap {
    pub disk: Option<PathBuf>,
    pub kernel: Option<PathBuf>,
    pub initrd: Option<PathBuf>,
    pub console: Option<PathBuf>,
    /// The NoCloud seed disk ([`super::SEED_DEV`]).
    pub seed: Option<PathBuf>,
    /// (MAC, bridge); an interface whose MAC is not here keeps its bridge.
    pub bridges: Vec<(String, String)>,
}

/// The (MAC, bridge) of each bridged interface of domain XML `xml`.
pub fn bridges(xml: &str) -> anyhow::Result<Vec<(String, String)>> {
    let doc = roxmltree::Document::parse(xml)?;
    Ok(doc
        .descendants()
        .filter(|n| n.has_tag_name("interface") && n.attribute("type") == Some("bridge"))
        .filter_map(|i| {
            let child = |tag: &str, attr: &str| {
                i.children()
                    .find(|c| c.has_tag_name(tag))
                    .and_then(|c| c.attribute(attr))
                    .map(str::to_string)
            };
            Some((child("mac", "address")?, child("source", "bridge")?))
        })
        .collect())
}

/// Rewrites `xml` (a migratable or save-image domain XML) so that disk `vda`,
/// the seed disk, kernel, initrd and the serial log point at `to`'s paths and the owner mark
/// names `new_owner`. Errors when the XML lacks an element `to` names.
pub fn rewrite_for(xml: &str, to: &PathMap, new_owner: &str) -> anyhow::Result<String> {
    let doc = roxmltree::Document::parse(xml)?;
    let mut edits: Vec<(std::ops::Range<usize>, String)> = Vec::new();
    let find = |pred: &dyn Fn(&roxmltree::Node) -> bool| doc.descendants().find(|n| pred(n));
    // Replace the text of an element or the value of an attribute by range.
    let text_of = |tag: &str, new: &Option<PathBuf>, edits: &mut Vec<(std::ops::Range<usize>, String)>| -> anyhow::Result<()> {
        if let Some(new) = new {
            let node = find(&|n: &roxmltree::Node| n.tag_name().name() == tag && n.parent().map(|p| p.tag_name().name()) == Some("os"))
                .ok_or_else(|| anyhow::anyhow!("domain XML has no <os><{tag}>"))?;
            let t = node.first_child().ok_or_else(|| anyhow::anyhow!("empty <{tag}>"))?;
            edits.push((t.range(), p(new)));
        }
        Ok(())
    };
    text_of("kernel", &to.kernel, &mut edits)?;
    text_of("initrd", &to.initrd, &mut edits)?;
    let attr_edit =
        |node: roxmltree::Node, attr: &str, new: &Path, edits: &mut Vec<(std::ops::Range<usize>, String)>| -> anyhow::Result<()> {
            let a = node
                .attribute_node(attr)
                .ok_or_else(|| anyhow::anyhow!("<source> without {attr}"))?;
            edits.push((a.range_value(), p(new)));
            Ok(())
        };
    for (dev, path) in [("vda", &to.disk), (super::SEED_DEV, &to.seed)] {
        let Some(path) = path else { continue };
        let target = find(&|n: &roxmltree::Node| n.tag_name().name() == "target" && n.attribute("dev") == Some(dev))
            .ok_or_else(|| anyhow::anyhow!("domain XML has no disk {dev}"))?;
        let source = target
            .parent()
            .and_then(|d| d.children().find(|c| c.tag_name().name() == "source"))
            .ok_or_else(|| anyhow::anyhow!("disk {dev} has no <source>"))?;
        attr_edit(source, "file", path, &mut edits)?;
    }
    if let Some(console) = &to.console {
        // The live XML repeats the serial port as <console>: both go. A
        // pty's log file (this version's XML), or the file itself (a
        // checkpoint's XML of before the console could be attached).
        find(&|n: &roxmltree::Node| n.tag_name().name() == "serial").ok_or_else(|| anyhow::anyhow!("domain XML has no <serial>"))?;
        for dev in doc.descendants().filter(|n| matches!(n.tag_name().name(), "serial" | "console")) {
            let child = |name: &str| dev.children().find(|c| c.tag_name().name() == name);
            let (node, attr) = match dev.attribute("type") {
                Some("file") => (child("source"), "path"),
                Some("pty") => (child("log"), "file"),
                _ => continue,
            };
            let node = node.ok_or_else(|| anyhow::anyhow!("<{}> has no file to write to", dev.tag_name().name()))?;
            attr_edit(node, attr, console, &mut edits)?;
        }
    }
    // One edit per interface: the first (MAC, bridge) naming it wins.
    let mut bridged = std::collections::HashSet::new();
    for (mac, bridge) in &to.bridges {
        let Some(source) = doc
            .descendants()
            .filter(|n| n.has_tag_name("interface"))
            .find(|i| {
                i.children()
                    .any(|c| c.has_tag_name("mac") && c.attribute("address") == Some(mac.as_str()))
            })
            .and_then(|i| i.children().find(|c| c.has_tag_name("source")))
        else {
            continue;
        };
        let a = source
            .attribute_node("bridge")
            .ok_or_else(|| anyhow::anyhow!("the <interface> of {mac} has no bridge"))?;
        if bridged.insert(a.range_value().start) {
            edits.push((a.range_value(), esc(bridge)));
        }
    }
    let owner = doc
        .descendants()
        .find(|n| n.tag_name().name() == "owner" && n.tag_name().namespace() == Some(METADATA_NS))
        .ok_or_else(|| anyhow::anyhow!("domain XML has no VEEH owner metadata"))?;
    edits.push(match owner.first_child() {
        Some(text) => (text.range(), esc(new_owner)),
        // An empty mark, `<veeh:owner></veeh:owner>` or `<veeh:owner/>`.
        None => {
            let whole = owner.range();
            let tag = &xml[whole.clone()];
            match tag.strip_suffix("/>") {
                Some(open) => (whole, format!("{open}>{}</{}>", esc(new_owner), qname(open))),
                None => {
                    let at = whole.start + tag.find('>').map_or(0, |i| i + 1);
                    (at..at, esc(new_owner))
                }
            }
        }
    });
    edits.sort_by_key(|(r, _)| std::cmp::Reverse(r.start));
    let mut out = xml.to_string();
    for (range, new) in edits {
        out.replace_range(range, &new);
    }
    Ok(out)
}
