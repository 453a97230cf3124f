//! Layouts of kernel structures, read from the kernel's BTF: the offsets the eBPF programs need
//! to read a field, passed to them as load-time constants (a hand-made CO-RE relocation, which
//! aya-ebpf cannot emit from Rust).
use anyhow::{Context as _, Result, anyhow};
use btf_rs::{Backend, Btf, Struct, Type};

const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Byte offset of `field` in `struct name`, looking into anonymous structs and unions.
pub fn field_offset(name: &str, field: &str) -> Result<u32> {
    // Mapped and read lazily: parsing all of the kernel's BTF up front costs ~130 ms.
    let btf = Btf::from_file_with_backend(VMLINUX_BTF, Backend::Mmap)
        .with_context(|| format!("cannot read {VMLINUX_BTF}"))?;
    offset_in(&btf, name, field)
}

fn offset_in(btf: &Btf, name: &str, field: &str) -> Result<u32> {
    let found = btf.resolve_types_by_name(name).unwrap_or_default().into_iter().find_map(|t| match t {
        Type::Struct(s) => find(btf, &s, field),
        _ => None,
    });
    let bits = found.ok_or_else(|| anyhow!("the kernel's BTF has no struct {name} with a field {field}"))?;
    Ok(bits / 8)
}

/// Bit offset of `field` in `s`.
fn find(btf: &Btf, s: &Struct, field: &str) -> Option<u32> {
    s.members.iter().find_map(|member| {
        let name = btf.resolve_name(member).ok()?;
        if name == field {
            return Some(member.bit_offset());
        }
        if !name.is_empty() {
            return None;
        }
        match btf.resolve_chained_type(member).ok()? {
            Type::Struct(inner) | Type::Union(inner) => Some(member.bit_offset() + find(btf, &inner, field)?),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_struct_fields() {
        // pid and tgid are consecutive pid_t fields of task_struct in every kernel since 2.6.
        let pid = field_offset("task_struct", "pid").unwrap();
        let tgid = field_offset("task_struct", "tgid").unwrap();
        assert_eq!(tgid, pid + 4);
        assert!(field_offset("task_struct", "no_such_field").is_err());
        assert!(field_offset("no_such_struct", "pid").is_err());
    }
}
