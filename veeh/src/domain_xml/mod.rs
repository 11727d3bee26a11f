//! libvirt domain XML: generated from a VEE's spec, read back for ownership,
//! and rewritten with the destination's paths for a live migration.

use std::borrow::Cow;
use std::path::PathBuf;

use quick_xml::events::attributes::Attribute;
use quick_xml::events::{BytesEnd, BytesStart, BytesText, Event};
use quick_xml::name::QName;
use quick_xml::Writer;

use crate::accel::Accel;

/// XML namespace of the VEEH's domain metadata (`<metadata>` element).
pub const METADATA_NS: &str = "urn:vee-manager:veeh:1";

/// Everything the generated domain XML depends on.
#[derive(Clone, Debug, PartialEq)]
pub struct DomainSpec {
    /// VEE UUID; the domain is named `vee-<uuid>` and has this UUID.
    pub vee_id: String,
    pub service_id: String,
    /// Host name of the VEEH that owns the domain.
    pub owner: String,
    pub accel: Accel,
    /// vCPUs.
    pub vcpus: u32,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// The most vCPUs a resize may give it (hot-plug): above `vcpus`, the
    /// domain has this many, `vcpus` of them online.
    pub max_vcpus: u32,
    /// The most memory (MiB) a resize may give it: above `memory_mib`, the
    /// domain has this much, a virtio balloon holding it to `memory_mib`.
    pub max_memory_mib: u64,
    /// The VEE's private qcow2 overlay, if it has a disk.
    pub disk: Option<PathBuf>,
    /// Direct kernel boot: kernel and optional initrd in the image cache.
    pub kernel: Option<PathBuf>,
    pub initrd: Option<PathBuf>,
    pub cmdline: String,
    /// Serial console log (appended to, so it survives restore/migration).
    pub console: PathBuf,
    /// The NoCloud seed disk (read-only, after the VEE's own disk), if the
    /// VEE has first-boot data.
    pub seed: Option<PathBuf>,
    /// NICs in guest order: virtio on the network's bridge, with the
    /// VEEM's MAC and the network's MTU.
    pub nics: Vec<NicXml>,
}

/// One NIC of the domain.
#[derive(Clone, Debug, PartialEq)]
pub struct NicXml {
    pub mac: String,
    pub bridge: String,
    /// Bytes.
    pub mtu: u32,
}

/// The domain name of a VEE: `vee-<uuid>`.
pub fn domain_name(vee_id: &str) -> String {
    format!("vee-{vee_id}")
}

/// The VEE ID of a domain name `vee-<uuid>`, if it is one.
pub fn vee_id_of(domain: &str) -> Option<&str> {
    domain.strip_prefix("vee-")
}

/// `s` as XML text or attribute value that reads back exactly: markup
/// characters escaped, and tab, newline and carriage return as character
/// references (a parser normalises them otherwise: a CR in text reads as
/// LF, any of them in an attribute as a space; found by fuzz/domain_xml).
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('\'', "&apos;")
        .replace('"', "&quot;")
        .replace('\t', "&#9;")
        .replace('\n', "&#10;")
        .replace('\r', "&#13;")
}

/// The target device of the NoCloud seed disk.
pub const SEED_DEV: &str = "vdb";

/// The guest agent's virtio-serial port name (qemu-guest-agent's default).
pub const GUEST_AGENT_CHANNEL: &str = "org.qemu.guest_agent.0";
/// The virtio-serial port a guest reports its KPIs on (`crate::kpi`).
pub const KPI_CHANNEL: &str = "org.vee.kpi.0";

type Xml = Writer<Vec<u8>>;

/// Attributes with values escaped by [`esc`] (quick-xml's own escaping leaves
/// tab, LF and CR as they are, which a parser then normalises).
fn start<'a>(tag: &'a str, attrs: &[(&'a str, &str)]) -> BytesStart<'a> {
    let mut e = BytesStart::new(tag);
    for (k, v) in attrs {
        e.push_attribute(Attribute {
            key: QName(k.as_bytes()),
            value: Cow::Owned(esc(v).into_bytes()),
        });
    }
    e
}

// Writing into a Vec cannot fail: the writer's io::Result is always Ok.
fn write(w: &mut Xml, ev: Event) {
    w.write_event(ev).expect("writing XML into memory");
}

/// `<tag attrs…/>`.
fn empty(w: &mut Xml, tag: &str, attrs: &[(&str, &str)]) {
    write(w, Event::Empty(start(tag, attrs)));
}

/// `<tag attrs…>text</tag>`.
fn text(w: &mut Xml, tag: &str, attrs: &[(&str, &str)], text: &str) {
    write(w, Event::Start(start(tag, attrs)));
    write(w, Event::Text(BytesText::from_escaped(esc(text))));
    write(w, Event::End(BytesEnd::new(tag)));
}

/// `<tag attrs…>` what `body` writes `</tag>`.
fn elem(w: &mut Xml, tag: &str, attrs: &[(&str, &str)], body: impl FnOnce(&mut Xml)) {
    write(w, Event::Start(start(tag, attrs)));
    body(w);
    write(w, Event::End(BytesEnd::new(tag)));
}

/// Generates the domain XML (libvirt's format, written with quick-xml):
/// - machine `pc`; CPU model `qemu64` under TCG, `host-model` under KVM;
/// - ACPI and APIC, so a shutdown request reaches the guest as a power
///   button press (`stop` is a clean shutdown before the destroy);
/// - the clock in UTC with the timer policies virt-install and OpenStack
///   use (RTC catch-up, PIT delay, no HPET, kvm-clock under KVM), so a guest
///   keeps time and its clock can be set after a restore;
/// - virtio disk `vda`, the NoCloud seed `vdb` (read-only), a virtio NIC per service network, a serial console
///   on a pty logged to a file, a virtio-serial channel for the guest agent
///   ([`GUEST_AGENT_CHANNEL`]; libvirt picks the socket path) and one for
///   the guest's KPIs ([`KPI_CHANNEL`]), no graphics
///   (lab notes: `<graphics type='none'/>` is invalid), no balloon.
pub fn generate(spec: &DomainSpec) -> String {
    let mut w = Writer::new_with_indent(Vec::new(), b' ', 2);
    let domain_name = domain_name(&spec.vee_id);
    elem(&mut w, "domain", &[("type", spec.accel.domain_type())], |w| {
        text(w, "name", &[], &domain_name);
        text(w, "uuid", &[], &spec.vee_id);
        elem(w, "metadata", &[], |w| {
            elem(w, "veeh:vee", &[("xmlns:veeh", METADATA_NS)], |w| {
                text(w, "veeh:owner", &[], &spec.owner);
                text(w, "veeh:service", &[], &spec.service_id);
            })
        });
        text(
            w,
            "memory",
            &[("unit", "MiB")],
            &spec.memory_mib.max(spec.max_memory_mib).to_string(),
        );
        if spec.max_memory_mib > spec.memory_mib {
            text(w, "currentMemory", &[("unit", "MiB")], &spec.memory_mib.to_string());
        }
        if spec.max_vcpus > spec.vcpus {
            text(w, "vcpu", &[("current", &spec.vcpus.to_string())], &spec.max_vcpus.to_string());
        } else {
            text(w, "vcpu", &[], &spec.vcpus.to_string());
        }
        elem(w, "os", &[], |w| {
            text(w, "type", &[("arch", "x86_64"), ("machine", "pc")], "hvm");
            match &spec.kernel {
                Some(k) => {
                    text(w, "kernel", &[], &k.display().to_string());
                    if let Some(i) = &spec.initrd {
                        text(w, "initrd", &[], &i.display().to_string());
                    }
                    text(w, "cmdline", &[], &spec.cmdline);
                }
                None => empty(w, "boot", &[("dev", "hd")]),
            }
        });
        elem(w, "features", &[], |w| {
            empty(w, "acpi", &[]);
            empty(w, "apic", &[]);
        });
        match spec.accel {
            Accel::Tcg => elem(w, "cpu", &[("mode", "custom"), ("match", "exact")], |w| {
                text(w, "model", &[("fallback", "forbid")], "qemu64")
            }),
            Accel::Kvm => empty(w, "cpu", &[("mode", "host-model")]),
        }
        elem(w, "clock", &[("offset", "utc")], |w| {
            empty(w, "timer", &[("name", "rtc"), ("tickpolicy", "catchup")]);
            empty(w, "timer", &[("name", "pit"), ("tickpolicy", "delay")]);
            empty(w, "timer", &[("name", "hpet"), ("present", "no")]);
            if spec.accel == Accel::Kvm {
                empty(w, "timer", &[("name", "kvmclock"), ("present", "yes")]);
            }
        });
        text(w, "on_poweroff", &[], "destroy");
        text(w, "on_reboot", &[], "restart");
        text(w, "on_crash", &[], "destroy");
        elem(w, "devices", &[], |w| devices(w, spec));
    });
    let mut xml = String::from_utf8(w.into_inner()).expect("UTF-8 in, UTF-8 out");
    xml.push('\n');
    xml
}

fn devices(w: &mut Xml, spec: &DomainSpec) {
    if let Some(d) = &spec.disk {
        elem(w, "disk", &[("type", "file"), ("device", "disk")], |w| {
            empty(w, "driver", &[("name", "qemu"), ("type", "qcow2")]);
            empty(w, "source", &[("file", &d.display().to_string())]);
            empty(w, "target", &[("dev", "vda"), ("bus", "virtio")]);
        });
    }
    if let Some(s) = &spec.seed {
        // Not part of a snapshot (libvirt's `snapshot='no'`) nor copied by a
        // migration: each host writes its own from the spec.
        elem(w, "disk", &[("type", "file"), ("device", "disk"), ("snapshot", "no")], |w| {
            empty(w, "driver", &[("name", "qemu"), ("type", "raw")]);
            empty(w, "source", &[("file", &s.display().to_string())]);
            empty(w, "target", &[("dev", SEED_DEV), ("bus", "virtio")]);
            empty(w, "readonly", &[]);
        });
    }
    for n in &spec.nics {
        elem(w, "interface", &[("type", "bridge")], |w| {
            empty(w, "mac", &[("address", &n.mac)]);
            empty(w, "source", &[("bridge", &n.bridge)]);
            empty(w, "model", &[("type", "virtio")]);
            empty(w, "mtu", &[("size", &n.mtu.to_string())]);
        });
    }
    // A pty, so that the console can be attached to (virDomainOpenConsole,
    // `crate::console`), its output also logged to the console file.
    elem(w, "serial", &[("type", "pty")], |w| {
        empty(w, "log", &[("file", &spec.console.display().to_string()), ("append", "on")]);
        empty(w, "target", &[("port", "0")]);
    });
    elem(w, "channel", &[("type", "unix")], |w| {
        empty(w, "source", &[("mode", "bind")]);
        empty(w, "target", &[("type", "virtio"), ("name", GUEST_AGENT_CHANNEL)]);
    });
    // The guest's KPIs, out of it only (crate::kpi).
    elem(w, "channel", &[("type", "unix")], |w| {
        empty(w, "source", &[("mode", "bind")]);
        empty(w, "target", &[("type", "virtio"), ("name", KPI_CHANNEL)]);
    });
    if spec.max_memory_mib > spec.memory_mib {
        // Memory resizable while it runs: the guest's balloon driver holds
        // what it may use (and reports its statistics every 5 s).
        elem(w, "memballoon", &[("model", "virtio")], |w| empty(w, "stats", &[("period", "5")]));
    } else {
        empty(w, "memballoon", &[("model", "none")]);
    }
}

mod rewrite;
#[cfg(test)]
mod tests;

pub use rewrite::{bridges, ownership, rewrite_for, Ownership, PathMap};
