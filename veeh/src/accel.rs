//! Choosing the accelerator: KVM or TCG.

use crate::config::AccelChoice;

/// The accelerator guests run under; `domain type='kvm'` or `'qemu'` (TCG).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    /// libvirt's domain type for this accelerator.
    pub fn domain_type(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "qemu",
        }
    }

    /// Name in the compatibility profile: `kvm` or `tcg`.
    pub fn name(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }

    /// Resolves `auto`: KVM only when `cpuinfo` has the `vmx` or `svm` flag
    /// and /dev/kvm exists. A nested KVM without them makes no progress
    /// (shared/notes/libvirt-lab.md, "KVM versus TCG").
    pub fn resolve(choice: AccelChoice, cpuinfo: &str, dev_kvm: bool) -> Self {
        match choice {
            AccelChoice::Kvm => Accel::Kvm,
            AccelChoice::Tcg => Accel::Tcg,
            AccelChoice::Auto => {
                let hw = cpuinfo
                    .lines()
                    .filter(|l| l.starts_with("flags"))
                    .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"));
                if hw && dev_kvm {
                    Accel::Kvm
                } else {
                    Accel::Tcg
                }
            }
        }
    }

    /// Resolves `choice` on this machine.
    pub fn detect(choice: AccelChoice) -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        Self::resolve(choice, &cpuinfo, std::path::Path::new("/dev/kvm").exists())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_picks_kvm_only_with_vmx_or_svm() {
        let plain = "flags\t: fpu vme de pse hypervisor\n";
        let vmx = "flags\t: fpu vme vmx hypervisor\n";
        let svm = "flags\t: fpu svm\n";
        assert_eq!(Accel::resolve(AccelChoice::Auto, plain, true), Accel::Tcg);
        assert_eq!(Accel::resolve(AccelChoice::Auto, vmx, true), Accel::Kvm);
        assert_eq!(Accel::resolve(AccelChoice::Auto, svm, true), Accel::Kvm);
        assert_eq!(Accel::resolve(AccelChoice::Auto, vmx, false), Accel::Tcg);
        assert_eq!(Accel::resolve(AccelChoice::Kvm, plain, false), Accel::Kvm);
        assert_eq!(Accel::resolve(AccelChoice::Tcg, vmx, true), Accel::Tcg);
    }
}
