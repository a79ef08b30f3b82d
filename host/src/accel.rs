//! The accelerator QEMU runs guests with: KVM where it works, TCG (QEMU's own translator)
//! otherwise, chosen by probing the machine. pincer's VMs and libguestfs's appliance (image
//! import) both follow it.

/// How the guest's CPU is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accel {
    /// Hardware virtualization through /dev/kvm.
    Kvm,
    /// QEMU's own translator: slower, works everywhere.
    Tcg,
}

impl std::fmt::Display for Accel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Kvm => "kvm",
            Self::Tcg => "tcg",
        })
    }
}

/// The accelerator to use and why: KVM where `/dev/kvm` opens and the CPU shows hardware
/// virtualization (vmx or svm), TCG otherwise. A `/dev/kvm` without either is a
/// para-virtualized device that stock guest kernels hang under, so it is not trusted.
/// `PINCER_VM_ACCEL=kvm|tcg` overrides the probe.
pub fn probe_accel() -> (Accel, String) {
    match std::env::var("PINCER_VM_ACCEL").as_deref() {
        Ok("kvm") => return (Accel::Kvm, "PINCER_VM_ACCEL=kvm".into()),
        Ok("tcg") => return (Accel::Tcg, "PINCER_VM_ACCEL=tcg".into()),
        _ => {}
    }
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags: Vec<&str> = cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    let hw = flags.iter().find(|f| **f == "vmx" || **f == "svm").copied();
    let kvm = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm");
    decide(hw, kvm.as_ref().map(|_| ()).map_err(ToString::to_string))
}

/// The probe's decision from what it found.
fn decide(hw: Option<&str>, kvm: Result<(), String>) -> (Accel, String) {
    match (hw, kvm) {
        (Some(flag), Ok(())) => (
            Accel::Kvm,
            format!("/dev/kvm opens and the CPU has hardware virtualization ({flag})"),
        ),
        (Some(_), Err(e)) => (Accel::Tcg, format!("/dev/kvm cannot be opened ({e})")),
        (None, Ok(())) => (
            Accel::Tcg,
            "/dev/kvm exists but the CPU shows no vmx/svm (nested para-virtualization, which stock guest kernels hang under)".into(),
        ),
        (None, Err(_)) => (
            Accel::Tcg,
            "no hardware virtualization on this machine".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kvm_is_chosen_only_with_hardware_virtualization() {
        assert_eq!(decide(Some("vmx"), Ok(())).0, Accel::Kvm);
        let (accel, why) = decide(None, Ok(()));
        assert_eq!(accel, Accel::Tcg);
        assert!(why.contains("no vmx/svm"), "{why}");
        assert_eq!(decide(Some("svm"), Err("denied".into())).0, Accel::Tcg);
        assert_eq!(decide(None, Err("missing".into())).0, Accel::Tcg);
    }
}
